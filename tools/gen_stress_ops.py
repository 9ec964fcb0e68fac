#!/usr/bin/env python3
"""Generates a compile-time stress header: N op classes in the style of kiln's
real ops (include/kiln/dialect/*.h), for the compile budget test
(300 ops must pass `g++ -std=c++20 -fsyntax-only` in <= 3 s).

Each op has 1-4 traits and 0-2 interfaces (InferMetaInterface with an inline
static infer_meta, VjpInterface with an inline static vjp), static name /
num_operands / num_results, an inline build(), and about half of them a
reflected `struct Attributes` with 1-3 fields (plus an accessor that goes
through attrs()). The header also defines

  void register_stress_ops();              // registers every op (make_info,
                                           // interface Models, attribute schema)
  void build_stress_program(Program& p);   // creates some ops through a Builder

so that everything the IR instantiates per op is instantiated. The output is
deterministic (fixed seed), byte for byte.

usage: gen_stress_ops.py [-n 300] [--create K] [-o OUT]
  --create K  ops created through the Builder (default 12; -1 = all)
"""

import argparse
import random
import sys

TRAITS = ["ReadOnly", "ValueSemantics", "Inplace", "ViewLike", "Random", "SideEffect",
          "Communication"]

# (C++ type, build() parameter type, default argument expression)
FIELD_TYPES = [
    ("bool", "bool", "false"),
    ("std::int32_t", "std::int32_t", "0"),
    ("std::int64_t", "std::int64_t", "-1"),
    ("float", "float", "1.0f"),
    ("double", "double", "0.5"),
    ("std::string", "const std::string&", '"x"'),
    ("std::vector<std::int64_t>", "const std::vector<std::int64_t>&", "{}"),
    ("DataType", "DataType", "DataType::Float32"),
]
FIELD_NAMES = ["axis", "keepdim", "epsilon", "scale", "mode", "shape", "dtype", "alpha", "beta",
               "transpose", "seed", "groups", "padding", "momentum", "label"]


def gen_op(rng, i):
    cls = f"StressOp{i}"
    traits = rng.sample(TRAITS, rng.randint(1, 4))
    ifaces = rng.choice([[], ["InferMetaInterface"], ["VjpInterface"],
                         ["InferMetaInterface", "VjpInterface"]])
    bases = traits + ifaces
    rng.shuffle(bases)  # traits and interfaces interleaved, as users write them
    n_in = rng.randint(1, 3)
    n_out = rng.randint(1, 2)
    fields = []
    if rng.random() < 0.5:
        names = rng.sample(FIELD_NAMES, rng.randint(1, 3))
        fields = [(n, rng.choice(FIELD_TYPES)) for n in names]

    out = []
    w = out.append
    w(f"// %r = stress.op{i}(...) : {n_in} operand(s) -> {n_out} result(s)")
    w(f"struct {cls} : Op<{cls}, {', '.join(bases)}> {{")
    w("  using Op::Op;")
    w(f'  static constexpr std::string_view name = "stress.op{i}";')
    w(f"  static constexpr int num_operands = {n_in}, num_results = {n_out};")
    for t, mp in (("Inplace", "inplace_map"), ("ViewLike", "view_map")):
        if t in traits:
            w(f"  static constexpr std::array<std::pair<std::uint32_t, std::uint32_t>, 1> "
              f"{mp}{{{{{{0, 0}}}}}};")
    if fields:
        decl = ", ".join(f"({ft[0]}, {fn})" for fn, ft in fields)
        w(f"  KILN_ATTRIBUTES({decl});")
    # build()
    params = ["Builder&", "OperationArgument& arg"]
    params += [f"Value x{k}" for k in range(n_in)]
    params += [f"{ft[1]} {fn} = {ft[2]}" for fn, ft in fields]
    w(f"  static void build({', '.join(params)}) {{")
    for k in range(n_in):
        w(f"    arg.add_operand(x{k});")
    if fields:
        w(f"    arg.attributes = to_named_attributes(Attributes{{{', '.join(fn for fn, _ in fields)}}});")
    if "InferMetaInterface" not in ifaces:
        for _ in range(n_out):
            w("    arg.add_result(x0.type());")
    w("  }")
    if "InferMetaInterface" in ifaces:
        w("  static std::vector<Type> infer_meta(const std::vector<Type>& in, "
          "DictionaryAttribute attrs) {")
        if fields:
            w("    auto a = from_attributes<Attributes>(attrs, name);")
            w(f"    (void)a.{fields[0][0]};")
        else:
            w("    (void)attrs;")
        w("    if (in.size() != num_operands)")
        w('      throw_error(ErrorKind::InvalidArgument, "op \'", name, "\' takes ", '
          'num_operands, " operands");')
        w(f"    return std::vector<Type>({n_out}, in[0]);")
        w("  }")
    if "VjpInterface" in ifaces:
        w("  static std::vector<Value> vjp(Builder&, Operation* op, "
          "const std::vector<Value>& out_grads) {")
        w("    std::vector<Value> grads(op->num_operands());")
        w("    if (!out_grads.empty()) grads[0] = out_grads[0];")
        w("    return grads;")
        w("  }")
    if fields:
        fn, ft = fields[0]
        w(f"  {ft[0]} {fn}() const {{ return attrs().{fn}; }}")
    w("};")
    w("")
    return "\n".join(out), n_in


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=300, help="number of ops (default 300)")
    ap.add_argument("--create", type=int, default=12,
                    help="ops created through a Builder (default 12; -1 = all)")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("-o", "--output", help="output file (default stdout)")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    ops = [gen_op(rng, i) for i in range(args.n)]
    n_create = args.n if args.create < 0 else min(args.create, args.n)

    out = []
    w = out.append
    w(f"// Generated by tools/gen_stress_ops.py -n {args.n} --create {args.create} "
      f"--seed {args.seed}. Do not edit.")
    w(f"// {args.n} kiln op classes for the compile budget test.")
    w("#pragma once")
    w("")
    w("#include <array>")
    w("#include <cstdint>")
    w("#include <string>")
    w("#include <utility>")
    w("#include <vector>")
    w("")
    w('#include "kiln/ir/builder.h"')
    w('#include "kiln/ir/builtin_types.h"')
    w('#include "kiln/ir/interfaces.h"')
    w('#include "kiln/ir/op.h"')
    w('#include "kiln/ir/traits.h"')
    w("")
    w("namespace kiln::stress {")
    w("")
    w("// The source of the chain build_stress_program() creates.")
    w("struct StressSourceOp : Op<StressSourceOp, ReadOnly, InferMetaInterface> {")
    w("  using Op::Op;")
    w('  static constexpr std::string_view name = "stress.source";')
    w("  static constexpr int num_operands = 0, num_results = 1;")
    w("  static void build(Builder&, OperationArgument&) {}")
    w("  static std::vector<Type> infer_meta(const std::vector<Type>&, DictionaryAttribute) {")
    w("    return {TensorType::get(DataType::Float32, {4, 4})};")
    w("  }")
    w("};")
    w("")
    for text, _ in ops:
        w(text)
    w("class StressDialect : public Dialect {")
    w(" public:")
    w('  StressDialect() : Dialect("stress", TypeId::get<StressDialect>()) {}')
    w("};")
    w("")
    w("inline void register_stress_ops() {")
    w("  IrContext* ctx = IrContext::instance();")
    w("  ctx->get_or_register_dialect<StressDialect>();")
    w("  ctx->op_info<StressSourceOp>();")
    for i in range(args.n):
        w(f"  ctx->register_op<StressOp{i}>();")
    w("}")
    w("")
    w("inline void build_stress_program(Program& p) {")
    w("  Builder b(p);")
    w("  Value v = b.create<StressSourceOp>().result();")
    for i in range(n_create):
        # Spread the created ops over the whole list.
        k = (i * args.n) // n_create if n_create else 0
        n_in = ops[k][1]
        w(f"  v = b.create<StressOp{k}>({', '.join(['v'] * n_in)}).result(0);")
    w("}")
    w("")
    w("}  // namespace kiln::stress")
    text = "\n".join(out) + "\n"
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
