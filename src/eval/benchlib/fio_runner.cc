#include "eval/benchlib/fio_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "eval/benchlib/process.h"
#include "core/input_file.h"

namespace kvtier::internal {
namespace {

// fio separates the names of several files (or directories) with ':'; a literal colon must be escaped.
std::string EscapeFioPath(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ':') out += '\\';
    out += c;
  }
  return out;
}

// fio's JSON read field by field; a field of another type reads as `fallback`, never throws.
double NumberAt(const nlohmann::json& obj, const char* key, double fallback = 0) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<double>() : fallback;
}

const nlohmann::json& ObjectAt(const nlohmann::json& obj, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  if (!obj.is_object()) return empty;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? *it : empty;
}

double Percentile(const nlohmann::json& clat, const char* key) {
  return NumberAt(ObjectAt(clat, "percentile"), key) / 1000.0;
}

}  // namespace

uint32_t IodepthFor(uint64_t inflight_bytes, uint64_t block_size) {
  if (block_size == 0) return 1;
  const uint64_t depth = inflight_bytes / block_size;
  return static_cast<uint32_t>(std::clamp<uint64_t>(depth, 1, 4096));
}

Result<std::vector<std::string>> BuildFioArgs(const FioJob& job) {
  if (job.write ? job.write_files == 0 : job.files.empty()) {
    return Status::InvalidArgument(job.write ? "fio write job needs a number of files" : "fio job needs files to read");
  }
  if (job.block_size == 0 || job.iodepth == 0) {
    return Status::InvalidArgument("fio job needs a block size and an iodepth");
  }
  if (job.ioengine.empty()) return Status::InvalidArgument("fio job needs an ioengine");
  if (job.link_dir.empty()) return Status::InvalidArgument("fio job needs a directory for its links");
  std::vector<std::string> argv = {
      "fio",
      "--name=kvtier-reference",
  };
  if (job.write) {
    argv.insert(argv.end(), {"--directory=" + EscapeFioPath(job.link_dir), "--nrfiles=" + std::to_string(job.write_files),
                             "--filesize=" + std::to_string(job.block_size), "--rw=write", "--unlink=1"});
  } else {
    argv.insert(argv.end(), {"--opendir=" + EscapeFioPath(job.link_dir), "--readonly", "--rw=read"});
  }
  argv.insert(argv.end(), {
      "--bs=" + std::to_string(job.block_size),
      "--iodepth=" + std::to_string(job.iodepth),
      "--ioengine=" + job.ioengine,
      "--direct=" + std::string(job.direct ? "1" : "0"),
      "--invalidate=1",
      "--group_reporting",
      "--output-format=json",
  });
  if (!job.hugepage_dir.empty()) {
    argv.push_back("--iomem=mmaphuge:" + EscapeFioPath(job.hugepage_dir + "/kvtier-fio." + std::to_string(getpid())));
  }
  if (!job.output_path.empty()) argv.push_back("--output=" + job.output_path);
  return argv;
}

std::string HugePageDirFor(uint64_t bytes) {
  std::ifstream meminfo("/proc/meminfo");
  uint64_t free_pages = 0, page_kib = 0;
  for (std::string key; meminfo >> key;) {
    uint64_t value = 0;
    meminfo >> value;
    if (key == "HugePages_Free:") free_pages = value;
    if (key == "Hugepagesize:") page_kib = value;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (page_kib == 0 || free_pages * page_kib * 1024 < bytes) return "";
  const std::string default_size = "pagesize=" + std::to_string(page_kib / 1024) + "M";
  std::ifstream mounts("/proc/mounts");
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream in(line);
    std::string dev, dir, type, opts;
    if (!(in >> dev >> dir >> type >> opts) || type != "hugetlbfs") continue;
    if (opts.find("pagesize=") != std::string::npos && opts.find(default_size) == std::string::npos) continue;
    if (dir.find('\\') != std::string::npos || access(dir.c_str(), W_OK) != 0) continue;  // \040: a space
    return dir;
  }
  return "";
}

std::string FioMemoryText(const FioJob& job) {
  return job.hugepage_dir.empty() ? "4 KiB pages" : "huge pages (hugetlbfs at " + job.hugepage_dir + ")";
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

Result<FioResult> ParseFioJson(std::string_view text, bool write) {
  const char* const dir = write ? "write" : "read";
  const size_t start = text.find('{');
  if (start == std::string_view::npos) return Status::Corruption("fio printed no JSON");
  nlohmann::json doc = nlohmann::json::parse(text.substr(start), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Corruption("fio output is not valid JSON");
  if (!doc.is_object() || !doc.contains("jobs") || !doc["jobs"].is_array() || doc["jobs"].empty() ||
      !doc["jobs"][0].is_object() || !doc["jobs"][0].contains(dir) ||
      !doc["jobs"][0][dir].is_object()) {
    return Status::Corruption(std::string("fio JSON has no ") + dir + " job");
  }
  const auto& read = doc["jobs"][0][dir];
  FioResult r;
  r.bytes_per_second = NumberAt(read, "bw_bytes");
  const double bytes = NumberAt(read, "io_bytes");
  r.bytes = bytes > 0 && bytes < 1.8e19 ? static_cast<uint64_t>(bytes) : 0;
  r.seconds = NumberAt(read, "runtime") / 1000.0;
  r.p50_us = Percentile(ObjectAt(read, "clat_ns"), "50.000000");
  r.p99_us = Percentile(ObjectAt(read, "clat_ns"), "99.000000");
  const nlohmann::json& opts = ObjectAt(doc["jobs"][0], "job options");
  const auto engine = opts.find("ioengine");
  if (engine != opts.end() && engine->is_string()) r.ioengine = engine->get<std::string>();
  const auto depth = opts.find("iodepth");
  if (depth != opts.end() && depth->is_string()) {
    const unsigned long d = std::strtoul(depth->get<std::string>().c_str(), nullptr, 10);
    r.iodepth = static_cast<uint32_t>(std::min<unsigned long>(d, UINT32_MAX));
  }
  if (r.bytes == 0 || r.bytes_per_second <= 0) {
    return Status::InvalidArgument(write ? "fio wrote no bytes" : "fio read no bytes");
  }
  return r;
}

bool FioAvailable() { return OnPath("fio"); }

namespace {

// Hard links `<dir>/<i>` to `files`, removed (the links only) on destruction.
class FileLinks {
 public:
  ~FileLinks() {
    for (const std::string& l : links_) (void)unlink(l.c_str());
  }
  Status Make(const std::string& dir, const std::vector<std::string>& files) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::FromErrno(ec.value(), "create " + dir);
    for (size_t i = 0; i < files.size(); ++i) {
      std::string l = dir + "/" + std::to_string(i);
      if (link(files[i].c_str(), l.c_str()) != 0) return Status::FromErrno(errno, "link " + files[i] + " to " + l);
      links_.push_back(std::move(l));
    }
    return Status::OK();
  }

 private:
  std::vector<std::string> links_;
};

}  // namespace

Result<FioResult> RunFio(const FioJob& job) {
  if (job.output_path.empty()) return Status::InvalidArgument("RunFio needs an output path");
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> args, BuildFioArgs(job));
  const std::string command = ShellJoin(args);
  FileLinks links;
  KVTIER_RETURN_IF_ERROR(links.Make(job.link_dir, job.write ? std::vector<std::string>{} : job.files));
  const std::string errors_path = job.output_path + ".log";  // fio's notices, shown only when it fails
  const Status run = RunProcess(args, "", errors_path);
  if (!run.ok()) {
    auto errors = ReadBoundedFile(errors_path, 64 << 10, "fio's messages");
    std::string said = errors.ok() ? *errors : "";
    if (said.size() > 1000) said = said.substr(said.size() - 1000);
    return Status::IOError(run.message() + ": " + command + (said.empty() ? "" : "\nfio said: " + said));
  }
  KVTIER_ASSIGN_OR_RETURN(const std::string text,
                          ReadBoundedFile(job.output_path, kMaxJsonInputBytes, "fio output"));
  KVTIER_ASSIGN_OR_RETURN(FioResult r, ParseFioJson(text, job.write));
  r.memory = FioMemoryText(job);
  r.command = command;
  return r;
}

Result<FioResult> RunFioWithFallback(FioJob job) {
  auto r = RunFio(job);
  if (r.ok() || job.ioengine == "libaio") return r;
  job.ioengine = "libaio";
  return RunFio(job);
}

bool DdAvailable() { return OnPath("dd"); }

Result<FioResult> RunDdReference(const std::vector<std::string>& files, uint64_t block_size, uint32_t depth) {
  if (files.empty() || block_size == 0) return Status::InvalidArgument("dd reference needs files and a block size");
  depth = std::clamp<uint32_t>(depth, 1, static_cast<uint32_t>(files.size()));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes{0};
  std::vector<Status> failures(depth);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < depth; ++w) {
    workers.emplace_back([&, w] {
      for (size_t i; (i = next.fetch_add(1)) < files.size();) {
        const Status s = RunProcess({"dd", "if=" + files[i], "of=/dev/null", "bs=" + std::to_string(block_size),
                                     "iflag=direct", "status=none"});
        if (!s.ok()) {
          failures[w] = s;
          return;
        }
        std::error_code ec;
        bytes += std::filesystem::file_size(files[i], ec);
      }
    });
  }
  for (auto& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Status& s : failures) {
    if (!s.ok()) return s;
  }
  FioResult r;
  r.bytes = bytes.load();
  r.seconds = seconds;
  r.bytes_per_second = seconds > 0 ? static_cast<double>(r.bytes) / seconds : 0;
  r.ioengine = "dd";
  r.memory = "dd";
  r.iodepth = depth;
  r.command = std::to_string(depth) + " x dd iflag=direct bs=" + std::to_string(block_size) +
              " of=/dev/null, one file each (" + std::to_string(files.size()) + " files)";
  return r;
}

}  // namespace kvtier::internal
