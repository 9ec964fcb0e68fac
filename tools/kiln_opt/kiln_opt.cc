// kiln-opt: a program in, a pass pipeline run over it, the program out — the
// way MLIR users work with mlir-opt.
//
//   kiln-opt [INPUT] [--passes PIPELINE] [--print-ir-before PASS]...
//            [--print-ir-after PASS]... [--timing] [--memory-plan] [--no-verify]
//            [--emit text|json] [-o OUTPUT]
//   kiln-opt --list-passes
//
// INPUT is a file or '-' (standard input, the default) holding a program in
// kiln's text IR (kiln/ir/parser.h) or its JSON form (kiln/io/json.h; told
// apart by a leading '{'). PIPELINE is a comma-separated list of registered
// pass names ("dce,cse,fold"), or "default" for the executor's default
// pipeline; without --passes the program is only read, verified and
// printed. --print-ir-before/--print-ir-after print the program around the
// named pass ("*": every pass) to standard error; --timing prints each
// pass's time there. --memory-plan prints there the memory plan the CPU
// executor makes for the resulting program (its kiln.data ops fed, nothing
// fetched), known before any run when every temporary's shape is static:
// the arena's bytes (its exact peak for the planned temporaries) for runs
// on several threads and in program order, the same values' bytes unshared,
// and their live-set minimum. The result goes to OUTPUT (standard output by
// default) as text IR, or as JSON with --emit json.
//
// Exit status: 0; 1 with the error on standard error (a file that cannot be
// read, a program that does not parse or verify, an unknown pass, a pass
// that fails or breaks the IR); 2 for a bad command line.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>

#include "kiln/dialect/kiln_dialect.h"
#include "kiln/dialect/io_ops.h"
#include "kiln/exec/execution_options.h"
#include "kiln/exec/memory_plan.h"
#include "kiln/exec/plan_builder.h"
#include "kiln/io/file.h"
#include "kiln/io/json.h"
#include "kiln/ir/parser.h"
#include "kiln/passes/pass_manager.h"
#include "kiln/support/error.h"

using namespace kiln;

namespace {

constexpr const char* kUsage =
    "usage: kiln-opt [INPUT|-] [--passes PIPELINE] [--print-ir-before PASS]...\n"
    "                [--print-ir-after PASS]... [--timing] [--memory-plan] [--no-verify]\n"
    "                [--emit text|json] [-o OUTPUT]\n"
    "       kiln-opt --list-passes\n";

struct CommandLine {
  std::string input = "-";
  std::string output;  // empty: standard output
  std::string pipeline;
  bool emit_json = false;
  bool list_passes = false;
  bool memory_plan = false;
  PassManagerOptions pm;
};

// Throws std::invalid_argument with the complaint; main() exits 2 on it.
CommandLine parse_command_line(int argc, char** argv) {
  CommandLine cl;
  bool have_input = false;
  auto value = [&](int& i, std::string_view flag) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--passes" || a == "-p") cl.pipeline = value(i, a);
    else if (a == "--print-ir-before") cl.pm.print_ir_before.insert(value(i, a));
    else if (a == "--print-ir-after") cl.pm.print_ir_after.insert(value(i, a));
    else if (a == "--timing") cl.pm.timing = true;
    else if (a == "--memory-plan") cl.memory_plan = true;
    else if (a == "--no-verify") cl.pm.verify_each = false;
    else if (a == "--list-passes") cl.list_passes = true;
    else if (a == "-o") cl.output = value(i, a);
    else if (a == "--emit") {
      const std::string e = value(i, a);
      if (e != "text" && e != "json")
        throw std::invalid_argument("--emit takes 'text' or 'json', got '" + e + "'");
      cl.emit_json = e == "json";
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.size() > 1 && a[0] == '-') {
      throw std::invalid_argument("unknown option '" + std::string(a) + "'");
    } else if (have_input) {
      throw std::invalid_argument("more than one input ('" + cl.input + "' and '" + std::string(a) + "')");
    } else {
      cl.input = a;
      have_input = true;
    }
  }
  if (cl.pipeline == "default") cl.pipeline = kDefaultPasses;
  return cl;
}

std::string read_input(const std::string& path) {
  if (path != "-") return read_whole_file(path, "input program");
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

Program load(const std::string& text, const std::string& path) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return load_program_json(text);
  return parse_program(text, path == "-" ? "<stdin>" : path);
}

void list_passes() {
  const PassRegistry& r = PassRegistry::instance();
  for (const std::string& name : r.names()) std::cout << name << "  " << r.description(name) << '\n';
  std::cout << "default pipeline: " << kDefaultPasses << '\n';
}

// The CPU executor's plan of `program` as it is (no passes), every kiln.data
// op of its top block fed, nothing fetched: its memory plan from types.
void print_memory_plan(const Program& program, std::ostream& os) {
  std::vector<std::string> feeds;
  for (Operation* op : program.block())
    if (auto data = op->dyn_cast<DataOp>()) feeds.push_back(data.attrs().name);
  ExecutionOptions options;
  options.num_threads = 1;
  options.passes = "";
  const auto plan = PlanBuilder(program, std::move(feeds), {}, std::move(options)).build();
  const std::shared_ptr<const MemoryPlan> mp = plan_memory_from_types(*plan);
  if (!mp) {
    os << "memory plan: none before a run (a temporary's shape is known only at run time, or no "
          "temporary can share an arena)\n";
    return;
  }
  os << "memory plan: " << mp->pieces.size() << " temporaries in an arena of " << mp->arena_bytes
     << " bytes (" << mp->arena_bytes_in_order << " in program order); unshared " << mp->total_bytes
     << " bytes, live-set minimum " << mp->live_bytes << " bytes\n";
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cl;
  try {
    cl = parse_command_line(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "kiln-opt: " << e.what() << '\n' << kUsage;
    return 2;
  }
  try {
    if (cl.list_passes) {
      list_passes();
      return 0;
    }
    Program program = load(read_input(cl.input), cl.input);
    program.verify();
    if (!cl.pipeline.empty()) {
      PassManager pm = PassManager::parse(cl.pipeline, cl.pm);
      pm.run(program);
      if (cl.pm.timing) pm.timing_report().print(std::cerr);
    }
    if (cl.memory_plan) print_memory_plan(program, std::cerr);
    std::string out;
    if (cl.emit_json) {
      out = save_program_json(program, 2) + "\n";
    } else {
      out = program.to_string();
    }
    if (cl.output.empty()) std::cout << out;
    else write_file_atomic(cl.output, out, "output program");
    return 0;
  } catch (const Error& e) {
    std::cerr << "kiln-opt: " << e.what() << '\n';
    return 1;
  }
}
