#include "benchlib/fio_runner.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "benchlib/process.h"

namespace kvtier::internal {
namespace {

// fio separates several directories with ':'; a literal colon must be escaped.
std::string EscapeFioPath(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ':') out += '\\';
    out += c;
  }
  return out;
}

double Percentile(const nlohmann::json& clat, const char* key) {
  if (!clat.contains("percentile")) return 0;
  const auto& p = clat["percentile"];
  return p.contains(key) ? p[key].get<double>() / 1000.0 : 0;
}

}  // namespace

uint32_t IodepthFor(uint64_t inflight_bytes, uint64_t block_size) {
  if (block_size == 0) return 1;
  const uint64_t depth = inflight_bytes / block_size;
  return static_cast<uint32_t>(std::clamp<uint64_t>(depth, 1, 4096));
}

Result<std::vector<std::string>> BuildFioArgs(const FioJob& job) {
  if (job.directory.empty()) return Status::InvalidArgument("fio job needs a directory");
  if (job.block_size == 0 || job.files == 0 || job.iodepth == 0) {
    return Status::InvalidArgument("fio job needs a block size, a file count and an iodepth");
  }
  if (job.ioengine.empty()) return Status::InvalidArgument("fio job needs an ioengine");
  const std::string bs = std::to_string(job.block_size);
  std::vector<std::string> argv = {
      "fio",
      "--name=kvtier-reference",
      "--directory=" + EscapeFioPath(job.directory),
      "--rw=read",
      "--bs=" + bs,
      "--nrfiles=" + std::to_string(job.files),
      "--filesize=" + bs,
      "--size=" + std::to_string(job.block_size * job.files),
      "--iodepth=" + std::to_string(job.iodepth),
      "--ioengine=" + job.ioengine,
      "--direct=" + std::string(job.direct ? "1" : "0"),
      "--invalidate=1",
      "--group_reporting",
      "--output-format=json",
  };
  if (!job.output_path.empty()) argv.push_back("--output=" + job.output_path);
  return argv;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_=./:,+%@") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

Result<FioResult> ParseFioJson(std::string_view text) {
  const size_t start = text.find('{');
  if (start == std::string_view::npos) return Status::Corruption("fio printed no JSON");
  nlohmann::json doc = nlohmann::json::parse(text.substr(start), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Corruption("fio output is not valid JSON");
  if (!doc.contains("jobs") || !doc["jobs"].is_array() || doc["jobs"].empty() ||
      !doc["jobs"][0].contains("read")) {
    return Status::Corruption("fio JSON has no read job");
  }
  const auto& read = doc["jobs"][0]["read"];
  FioResult r;
  r.bytes_per_second = read.value("bw_bytes", 0.0);
  r.bytes = read.value("io_bytes", uint64_t{0});
  r.seconds = read.value("runtime", 0.0) / 1000.0;
  if (read.contains("clat_ns")) {
    r.p50_us = Percentile(read["clat_ns"], "50.000000");
    r.p99_us = Percentile(read["clat_ns"], "99.000000");
  }
  const nlohmann::json opts = doc["jobs"][0].value("job options", nlohmann::json::object());
  r.ioengine = opts.value("ioengine", "");
  const auto depth = opts.find("iodepth");
  if (depth != opts.end() && depth->is_string()) {
    r.iodepth = static_cast<uint32_t>(std::strtoul(depth->get<std::string>().c_str(), nullptr, 10));
  }
  if (r.bytes == 0 || r.bytes_per_second <= 0) return Status::InvalidArgument("fio read no bytes");
  return r;
}

bool FioAvailable() { return OnPath("fio"); }

Result<FioResult> RunFio(const FioJob& job) {
  if (job.output_path.empty()) return Status::InvalidArgument("RunFio needs an output path");
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> args, BuildFioArgs(job));
  const std::string command = ShellJoin(args);
  const Status run = RunProcess(args);
  if (!run.ok()) return Status::IOError(run.message() + ": " + command);
  std::ifstream in(job.output_path);
  std::stringstream text;
  text << in.rdbuf();
  KVTIER_ASSIGN_OR_RETURN(FioResult r, ParseFioJson(text.str()));
  r.command = command;
  return r;
}

}  // namespace kvtier::internal
