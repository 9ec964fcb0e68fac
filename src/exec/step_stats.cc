#include "kiln/exec/step_stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

namespace kiln {

namespace {

// s as a JSON string literal (nlohmann_json's escaping).
void write_json_string(std::ostream& os, const std::string& s) { os << nlohmann::json(s).dump(); }

// "1.234 ms", "56.7 us", "890 ns".
std::string format_ns(double ns) {
  char buf[32];
  if (ns >= 1e6) std::snprintf(buf, sizeof buf, "%.3f ms", ns / 1e6);
  else if (ns >= 1e3) std::snprintf(buf, sizeof buf, "%.3f us", ns / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  return buf;
}

std::string format_bytes(std::int64_t b) {
  char buf[32];
  if (b >= (std::int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / double(1 << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

}  // namespace

std::string to_chrome_trace(const StepStats& stats) {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << "{\"traceEvents\":[";
  bool first = true;
  std::map<std::uint32_t, std::string> streams;  // tid → stream name
  for (const NodeStats& n : stats.nodes) {
    if (!first) os << ',';
    first = false;
    os << "{\"name\":";
    write_json_string(os, n.op_name);
    os << ",\"cat\":\"op\",\"ph\":\"X\",\"ts\":" << double(n.start_ns) / 1000.0
       << ",\"dur\":" << double(n.duration_ns()) / 1000.0 << ",\"pid\":1,\"tid\":" << n.thread
       << ",\"args\":{\"label\":";
    write_json_string(os, n.label);
    os << ",\"instruction\":" << n.instruction << ",\"bytes_allocated\":" << n.bytes_allocated;
    if (!n.frame.empty()) {
      os << ",\"frame\":";
      write_json_string(os, n.frame);
      os << ",\"iteration\":" << n.iteration;
    }
    os << "}}";
    if (!n.stream.empty()) streams.emplace(n.thread, n.stream);
  }
  for (const auto& [tid, name] : streams) {
    os << (first ? "" : ",") << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << tid
       << ",\"args\":{\"name\":";
    write_json_string(os, "stream " + name);
    os << "}}";
    first = false;
  }
  os << "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"step_id\":" << stats.step_id
     << ",\"wall_ns\":" << stats.wall_ns << ",\"failed\":" << (stats.failed ? "true" : "false") << "}}";
  return os.str();
}

std::vector<OpSummary> summarize(const StepStats& stats) {
  std::map<std::string, OpSummary, std::less<>> by_name;
  for (const NodeStats& n : stats.nodes) {
    auto [it, fresh] = by_name.try_emplace(n.op_name);
    OpSummary& s = it->second;
    const std::int64_t d = n.duration_ns();
    if (fresh) {
      s.op_name = n.op_name;
      s.min_ns = d;
      s.max_ns = d;
    }
    ++s.calls;
    s.total_ns += d;
    s.min_ns = std::min(s.min_ns, d);
    s.max_ns = std::max(s.max_ns, d);
    s.bytes_allocated += n.bytes_allocated;
  }
  std::vector<OpSummary> rows;
  rows.reserve(by_name.size());
  for (auto& [name, s] : by_name) rows.push_back(std::move(s));
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpSummary& a, const OpSummary& b) { return a.total_ns > b.total_ns; });
  return rows;
}

std::string summary_table(const StepStats& stats) {
  const std::vector<OpSummary> rows = summarize(stats);
  std::size_t name_width = 4;  // "Name"
  for (const OpSummary& r : rows) name_width = std::max(name_width, r.op_name.size());
  name_width = std::max<std::size_t>(name_width, 5);  // "Total"
  std::int64_t ops_total = 0, bytes_total = 0;
  std::uint64_t calls_total = 0;
  for (const OpSummary& r : rows) {
    ops_total += r.total_ns;
    bytes_total += r.bytes_allocated;
    calls_total += r.calls;
  }
  // The share of the step: of its wall time, or of the ops' sum when the
  // wall time is unknown (a hand-made StepStats).
  const double step = stats.wall_ns > 0 ? double(stats.wall_ns) : double(ops_total);
  const int w = static_cast<int>(name_width);
  std::string out;
  std::vector<char> line(name_width + 160);
  auto add = [&](const char* name, const std::string& calls, const std::string& total, const std::string& mean,
                 const std::string& min, const std::string& max, const std::string& pct,
                 const std::string& bytes) {
    std::snprintf(line.data(), line.size(), "%-*s  %7s  %12s  %12s  %12s  %12s  %7s  %12s\n", w, name,
                  calls.c_str(), total.c_str(), mean.c_str(), min.c_str(), max.c_str(), pct.c_str(),
                  bytes.c_str());
    out += line.data();
  };
  auto pct = [&](std::int64_t ns) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f%%", step > 0 ? 100.0 * double(ns) / step : 0.0);
    return std::string(buf);
  };
  add("Name", "Calls", "Total", "Mean", "Min", "Max", "% step", "Allocated");
  out += std::string(name_width + 2 + 7 + 4 * 14 + 9 + 14, '-') + '\n';
  for (const OpSummary& r : rows)
    add(r.op_name.c_str(), std::to_string(r.calls), format_ns(double(r.total_ns)), format_ns(r.mean_ns()),
        format_ns(double(r.min_ns)), format_ns(double(r.max_ns)), pct(r.total_ns),
        format_bytes(r.bytes_allocated));
  out += std::string(name_width + 2 + 7 + 4 * 14 + 9 + 14, '-') + '\n';
  add("Total", std::to_string(calls_total), format_ns(double(ops_total)), "", "", "", pct(ops_total),
      format_bytes(bytes_total));
  std::snprintf(line.data(), line.size(), "Step %llu: wall time %s%s\n", static_cast<unsigned long long>(stats.step_id),
                format_ns(double(stats.wall_ns)).c_str(), stats.failed ? " (failed: partial)" : "");
  out += line.data();
  return out;
}

}  // namespace kiln
