// ONNX's recurrent layers RNN, GRU and LSTM, unrolled at import over the
// sequence (its length must be known then): the input projections of every
// step are one kiln.matmul per direction; each step then adds the hidden
// state's projection, applies the gates and activations and, where
// sequence_lens ends a sequence early, keeps the state (and writes zeros
// to Y) with kiln.where. Directions forward, reverse and bidirectional;
// layout 0 ([seq, batch, …]) or 1 ([batch, seq, …]); activations Sigmoid,
// Tanh and Relu; clip; GRU's linear_before_reset; LSTM's peepholes.
#include <string>

#include "kiln/dialect/kiln_dialect.h"
#include "op_table.h"

namespace kiln::onnx::detail {

namespace {

enum class Cell { Rnn, Gru, Lstm };

struct Recurrence {
  Recurrence(NodeContext& ctx, Cell k) : c(ctx), cell(k) {}
  NodeContext& c;
  Cell cell;
  std::int64_t steps = 0, batch = 0, hidden = 0, gates = 1;
  DataType dt = DataType::Float32;
  std::vector<std::string> activations;  // per direction: f (g, h)
  double clip = 0;                       // 0: none
  Value lens;                            // i64 [batch, 1] or null

  Value slice(Value v, std::int64_t axis, std::int64_t from, std::int64_t to) const {
    return c.b
        .create<StridedSliceOp>(v, std::vector<std::int64_t>{axis}, std::vector<std::int64_t>{from},
                                std::vector<std::int64_t>{to}, std::vector<std::int64_t>{1})
        .result();
  }
  Value pick(Value v, std::int64_t i) const {  // v[i] along axis 0, the axis dropped
    return c.b
        .create<GatherOp>(v, constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {i})), 0)
        .result();
  }
  Value gate(Value v, std::int64_t g) const { return slice(v, 1, g * hidden, (g + 1) * hidden); }
  Value activate(Value v, const std::string& name) const {
    if (clip > 0) v = c.b.create<ClipOp>(v, -clip, clip).result();
    if (name == "Sigmoid") return c.b.create<SigmoidOp>(v).result();
    if (name == "Tanh") return c.b.create<TanhOp>(v).result();
    if (name == "Relu") return c.b.create<ReluOp>(v).result();
    c.unsupported("activation '" + name + "'");
  }
  Value add(Value a, Value b) const { return c.b.create<AddOp>(a, b).result(); }
  Value mul(Value a, Value b) const { return c.b.create<MulOp>(a, b).result(); }
  Value zeros() const {
    return c.b.create<FullOp>(std::vector<std::int64_t>{batch, hidden}, 0.0, dt).result();
  }

  // Direction d over x [steps, batch, input]: Y's [steps, batch, hidden]
  // slices in step order, and the final states (h, and c for LSTM).
  std::vector<Value> run(Value x, std::int64_t d, bool reverse, std::vector<Value>& ys) const {
    const std::size_t a0 = static_cast<std::size_t>(d) * (cell == Cell::Rnn   ? 1
                                                          : cell == Cell::Gru ? 2
                                                                              : 3);
    const auto act = [&](std::size_t k) { return activations.at(a0 + k); };
    Value w = pick(c.input(1), d), r = pick(c.input(2), d);       // [G·H, I], [G·H, H]
    Value xw = c.b.create<MatmulOp>(x, w, false, true).result();  // [steps, batch, G·H]
    Value wb, rb;
    if (c.inputs.size() > 3 && c.inputs[3]) {
      Value bias = pick(c.inputs[3], d);
      wb = slice(bias, 0, 0, gates * hidden);
      rb = slice(bias, 0, gates * hidden, 2 * gates * hidden);
      xw = add(xw, wb);
    }
    Value h = c.inputs.size() > 5 && c.inputs[5] ? pick(c.inputs[5], d) : zeros();
    Value cs;
    if (cell == Cell::Lstm)
      cs = c.inputs.size() > 6 && c.inputs[6] ? pick(c.inputs[6], d) : zeros();
    Value p =
        cell == Cell::Lstm && c.inputs.size() > 7 && c.inputs[7] ? pick(c.inputs[7], d) : Value();
    ys.assign(static_cast<std::size_t>(steps), Value());
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::int64_t t = reverse ? steps - 1 - k : k;
      Value xt = pick(xw, t);
      Value hr = c.b.create<MatmulOp>(h, r, false, true).result();  // [batch, G·H]
      if (rb) hr = add(hr, rb);
      Value nh, nc;
      if (cell == Cell::Rnn) {
        nh = activate(add(xt, hr), act(0));
      } else if (cell == Cell::Gru) {
        Value z = activate(add(gate(xt, 0), gate(hr, 0)), act(0));
        Value rg = activate(add(gate(xt, 1), gate(hr, 1)), act(0));
        Value pre;
        if (c.int_attr("linear_before_reset", 0) != 0) {
          pre = add(gate(xt, 2), mul(rg, gate(hr, 2)));
        } else {
          pre =
              add(gate(xt, 2),
                  c.b.create<MatmulOp>(mul(rg, h), slice(r, 0, 2 * hidden, 3 * hidden), false, true)
                      .result());
          if (rb) pre = add(pre, slice(rb, 0, 2 * hidden, 3 * hidden));
        }
        Value hh = activate(pre, act(1));
        Value one = c.b.create<FullOp>(std::vector<std::int64_t>{}, 1.0, dt).result();
        nh = add(mul(c.b.create<SubOp>(one, z).result(), hh), mul(z, h));
      } else {  // gates i, o, f, c; peepholes i, o, f
        Value g = add(xt, hr);
        Value i = gate(g, 0), o = gate(g, 1), f = gate(g, 2);
        auto peep = [&](std::int64_t k) {
          return slice(p, 0, k * hidden, (k + 1) * hidden);
        };  // P [3·H]
        if (p) {
          i = add(i, mul(peep(0), cs));
          f = add(f, mul(peep(2), cs));
        }
        i = activate(i, act(0));
        f = activate(f, act(0));
        nc = add(mul(f, cs), mul(i, activate(gate(g, 3), act(1))));
        if (p) o = add(o, mul(peep(1), nc));
        nh = mul(activate(o, act(0)), activate(nc, act(2)));
      }
      if (lens) {  // steps past a sequence's length keep its state, Y gets zeros
        Value live =
            c.b.create<LessThanOp>(
                   constant_value(c.b, Tensor::from_vector<std::int64_t>(Dims{}, {t})), lens)
                .result();
        ys[static_cast<std::size_t>(t)] = c.b.create<WhereOp>(live, nh, zeros()).result();
        nh = c.b.create<WhereOp>(live, nh, h).result();
        if (nc) nc = c.b.create<WhereOp>(live, nc, cs).result();
      } else {
        ys[static_cast<std::size_t>(t)] = nh;
      }
      h = nh;
      cs = nc;
    }
    return cell == Cell::Lstm ? std::vector<Value>{h, cs} : std::vector<Value>{h};
  }
};

template <Cell kCell>
std::vector<Value> recurrent(NodeContext& c) {
  Recurrence rec(c, kCell);
  rec.gates = kCell == Cell::Rnn ? 1 : kCell == Cell::Gru ? 3 : 4;
  Value x = c.input(0);
  rec.dt = shaped_data_type(x.type());
  const bool batch_first = c.int_attr("layout", 0) != 0;
  if (batch_first) x = c.b.create<TransposeOp>(x, std::vector<std::int64_t>{1, 0, 2}).result();
  const std::vector<std::int64_t> xd = shaped_dims(x.type());
  if (xd.size() != 3 || xd[0] < 0 || xd[1] < 0)
    c.unsupported("an input whose sequence length and batch are not known at import");
  rec.steps = xd[0];
  rec.batch = xd[1];
  rec.hidden = c.int_attr("hidden_size", 0);
  if (rec.hidden < 1) c.unsupported("hidden_size " + std::to_string(rec.hidden));
  if (kCell == Cell::Lstm && c.int_attr("input_forget", 0) != 0)
    c.unsupported("LSTM with input_forget");
  if (c.has_attr("activation_alpha") || c.has_attr("activation_beta"))
    c.unsupported("activation_alpha / activation_beta");
  rec.clip = c.float_attr("clip", 0.0f);
  const auto* dir_attr = c.attribute("direction");
  const std::string direction = dir_attr ? dir_attr->s() : "forward";
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    c.unsupported("direction '" + direction + "'");
  const std::int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (const auto* a = c.attribute("activations")) {
    for (const auto& s : a->strings()) rec.activations.push_back(s);
  } else {
    const std::vector<std::string> one = kCell == Cell::Rnn ? std::vector<std::string>{"Tanh"}
                                         : kCell == Cell::Gru
                                             ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                             : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (std::int64_t d = 0; d < dirs; ++d)
      rec.activations.insert(rec.activations.end(), one.begin(), one.end());
  }
  const std::size_t per_dir = kCell == Cell::Rnn ? 1 : kCell == Cell::Gru ? 2 : 3;
  if (rec.activations.size() != per_dir * static_cast<std::size_t>(dirs))
    c.unsupported(std::to_string(rec.activations.size()) + " activations for " +
                  std::to_string(dirs) + " direction(s)");
  if (c.inputs.size() > 4 && c.inputs[4]) {
    Value lens = c.inputs[4];
    if (shaped_data_type(lens.type()) != DataType::Int64)
      lens = c.b.create<CastOp>(lens, DataType::Int64).result();
    rec.lens = c.b.create<ReshapeOp>(lens, std::vector<std::int64_t>{-1, 1}).result();
  }
  std::vector<Value> y_dirs, h_dirs, c_dirs;
  for (std::int64_t d = 0; d < dirs; ++d) {
    std::vector<Value> ys;
    std::vector<Value> last = rec.run(x, d, direction == "reverse" || d == 1, ys);
    y_dirs.push_back(c.b.create<StackOp>(ys, 0).result());  // [steps, batch, hidden]
    h_dirs.push_back(last[0]);
    if (kCell == Cell::Lstm) c_dirs.push_back(last[1]);
  }
  Value y = c.b.create<StackOp>(y_dirs, 1).result();   // [steps, dirs, batch, hidden]
  Value yh = c.b.create<StackOp>(h_dirs, 0).result();  // [dirs, batch, hidden]
  Value yc = kCell == Cell::Lstm ? c.b.create<StackOp>(c_dirs, 0).result() : Value();
  if (batch_first) {
    y = c.b.create<TransposeOp>(y, std::vector<std::int64_t>{2, 0, 1, 3}).result();
    yh = c.b.create<TransposeOp>(yh, std::vector<std::int64_t>{1, 0, 2}).result();
    if (yc) yc = c.b.create<TransposeOp>(yc, std::vector<std::int64_t>{1, 0, 2}).result();
  }
  if (kCell == Cell::Lstm) return {y, yh, yc};
  return {y, yh};
}

}  // namespace

void add_rnn_ops(OpTable& t) {
  t["RNN"] = {&recurrent<Cell::Rnn>, 7};
  t["GRU"] = {&recurrent<Cell::Gru>, 7};
  t["LSTM"] = {&recurrent<Cell::Lstm>, 7};
}

}  // namespace kiln::onnx::detail
