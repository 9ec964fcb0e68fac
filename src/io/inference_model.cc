// save_inference_model / load_inference_model (kiln/io/inference_model.h):
// for-test clone, prune, feeds to the front, fetch ops appended; both files
// prepared in memory, then written as one atomic save.
#include "kiln/io/inference_model.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <utility>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/frontend/clone_for_test.h"
#include "kiln/frontend/fold_batch_norm.h"
#include "kiln/frontend/prune.h"
#include "kiln/io/file.h"
#include "kiln/io/json.h"
#include "kiln/io/weights.h"

namespace kiln {

std::string inference_program_path(const std::string& path_prefix) { return path_prefix + ".json"; }
std::string inference_weights_path(const std::string& path_prefix) {
  return path_prefix + ".weights";
}

namespace {

constexpr std::string_view kSave = "save_inference_model: ";

// "fetch target #1 (result #0 of op 'kiln.matmul')" — how errors name a target.
std::string describe_target(std::size_t k, Value v) {
  std::string s = "fetch target #" + std::to_string(k) + " (";
  if (!v) return s + "a null value)";
  Operation* op = v.defining_op();
  if (!op) return s + "a block argument)";
  return s + "result #" + std::to_string(cast<OpResult>(v).index()) + " of op '" +
         std::string(op->name()) + "')";
}

// The top-level kiln.data ops of `p` by name.
std::map<std::string, Operation*, std::less<>> data_ops(const Program& p) {
  std::map<std::string, Operation*, std::less<>> out;
  for (Operation* op : p.block())
    if (auto d = op->dyn_cast<DataOp>()) out.emplace(d.attrs().name, op);
  return out;
}

// The name the original program's kiln.fetch op gives `v`, if it has one.
std::string fetch_name_of(const Program& p, Value v) {
  for (Operation* op : p.block())
    if (auto f = op->dyn_cast<FetchOp>(); f && op->operand_source(0) == v) return f.attrs().name;
  return {};
}

// The inference program of a save: checked, pruned, feeds first, fetch ops last.
Program inference_program(const std::vector<std::string>& feed_names,
                          const std::vector<Value>& fetch_targets, const Program& program) {
  if (fetch_targets.empty())
    throw_error(ErrorKind::InvalidArgument, kSave, "no fetch targets: name the values to predict");
  std::unordered_set<Value> top_level;
  for (Operation* op : program.block())
    for (std::uint32_t i = 0; i < op->num_results(); ++i) top_level.insert(op->result(i));

  IrMapping test_map;
  Program test = clone_for_test(program, &test_map);
  std::vector<Value> targets;
  for (std::size_t k = 0; k < fetch_targets.size(); ++k) {
    const Value t = fetch_targets[k];
    if (!t || !top_level.count(t))
      throw_error(ErrorKind::InvalidArgument, kSave, describe_target(k, t),
                  " is not a value of the program (a result of an op in its top-level block)");
    if (!test_map.contains(t))
      throw_error(ErrorKind::InvalidArgument, kSave, describe_target(k, t),
                  " is computed by training-only ops (backward, optimizer or set_parameter), "
                  "which an inference program drops");
    targets.push_back(test_map.lookup(t));
  }
  IrMapping prune_map;
  Program infer = prune(test, targets, &prune_map);
  for (Value& t : targets) t = prune_map.lookup(t);

  // Feeds: exactly the data ops the targets need, in the given order.
  const auto original_data = data_ops(program);
  auto needed = data_ops(infer);
  std::vector<Operation*> feeds;
  std::unordered_set<std::string> seen;
  for (const std::string& name : feed_names) {
    if (name.empty()) throw_error(ErrorKind::InvalidArgument, kSave, "a feed name is empty");
    if (!seen.insert(name).second)
      throw_error(ErrorKind::InvalidArgument, kSave, "feed '", name, "' is listed twice");
    if (!original_data.count(name))
      throw_error(ErrorKind::NotFound, kSave, "feed '", name,
                  "' is not a kiln.data op of the program");
    auto it = needed.find(name);
    if (it == needed.end())
      throw_error(ErrorKind::InvalidArgument, kSave, "feed '", name,
                  "' is not needed to compute the fetch targets (leave it out)");
    feeds.push_back(it->second);
    needed.erase(it);
  }
  if (!needed.empty())
    throw_error(ErrorKind::InvalidArgument, kSave, "the fetch targets need data '",
                needed.begin()->first, "', which is not among the feed names");
  for (auto it = feeds.rbegin(); it != feeds.rend(); ++it)
    if (*it != infer.block().front()) (*it)->move_before(infer.block().front());

  // Fetches: one kiln.fetch op per target, col = its index.
  Builder b(infer);
  std::unordered_set<std::string> fetch_names;
  for (std::size_t k = 0; k < targets.size(); ++k) {
    std::string name = fetch_name_of(program, fetch_targets[k]);
    if (name.empty() || fetch_names.count(name)) name = "fetch_" + std::to_string(k);
    while (fetch_names.count(name)) name += "_";
    fetch_names.insert(name);
    b.create<FetchOp>(targets[k], name, static_cast<std::int32_t>(k));
  }
  infer.verify();
  return infer;
}

}  // namespace

void save_inference_model(const std::string& path_prefix,
                          const std::vector<std::string>& feed_names,
                          const std::vector<Value>& fetch_targets, const Program& program,
                          const Scope& scope) {
  const std::string program_path = inference_program_path(path_prefix);
  const std::string weights_path = inference_weights_path(path_prefix);
  Program infer = inference_program(feed_names, fetch_targets, program);
  Scope folded, saved;
  fold_batch_norms(infer, scope, folded);
  for (const auto& [name, param] : infer.parameters()) {
    const Variable* v = folded.find_var(name);
    if (!v) v = scope.find_var(name);
    if (v && v->is<Tensor>()) saved.var(name).set(v->get<Tensor>());
  }
  const std::string text = save_program_json(infer, 1);
  std::string weights;
  try {
    weights = save_weights_bytes(saved, infer);
  } catch (const Error& e) {
    throw Error(e.kind(), "weights file '" + weights_path + "': " + e.message());
  }
  write_files_atomic({{weights_path, weights, "weights file"},
                      {program_path, text, "inference program file"}});
}

InferenceModel load_inference_model(const std::string& path_prefix, Scope& scope) {
  const std::string program_path = inference_program_path(path_prefix);
  const std::string weights_path = inference_weights_path(path_prefix);
  InferenceModel model;
  {
    const std::string text = read_whole_file(program_path, "inference program file");
    try {
      model.program = load_program_json(text);
    } catch (const Error& e) {
      throw Error(e.kind(), "inference program file '" + program_path + "': " + e.message());
    }
  }
  std::vector<std::pair<std::int32_t, Value>> fetches;  // (col, value)
  for (Operation* op : model.program.block()) {
    if (auto d = op->dyn_cast<DataOp>()) model.feed_names.push_back(d.attrs().name);
    if (auto f = op->dyn_cast<FetchOp>()) fetches.emplace_back(f.attrs().col, op->operand_source(0));
  }
  if (fetches.empty())
    throw_error(ErrorKind::InvalidArgument, "inference program file '", program_path,
                "' has no kiln.fetch op: it does not say what to fetch (save it with "
                "save_inference_model)");
  std::stable_sort(fetches.begin(), fetches.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t k = 0; k < fetches.size(); ++k) {
    if (fetches[k].first != static_cast<std::int32_t>(k))
      throw_error(ErrorKind::InvalidArgument, "inference program file '", program_path,
                  "': the cols of its ", fetches.size(), " kiln.fetch ops must be 0 to ",
                  fetches.size() - 1, " once each, but col ",
                  fetches[k].first < static_cast<std::int32_t>(k)
                      ? std::to_string(fetches[k].first) + " is repeated"
                      : std::to_string(k) + " is missing");
    model.fetch_targets.emplace_back(fetches[k].second);
  }
  load_weights(weights_path, scope, model.program);
  return model;
}

}  // namespace kiln
