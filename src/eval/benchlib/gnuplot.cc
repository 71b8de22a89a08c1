#include "eval/benchlib/gnuplot.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/input_file.h"
#include "core/output_file.h"
#include "eval/benchlib/process.h"

namespace kvtier::internal {
namespace {

namespace fs = std::filesystem;

// A new directory only this process's user can enter, removed (with what gnuplot left) on scope exit.
class PrivateDir {
 public:
  static Result<PrivateDir> Make() {
    std::error_code ec;
    const fs::path base = fs::temp_directory_path(ec);
    std::string tmpl = ((ec ? fs::path("/tmp") : base) / "kvtier-gnuplot-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno(errno, "create a directory for gnuplot");
    return PrivateDir(tmpl);
  }
  PrivateDir(PrivateDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  PrivateDir& operator=(PrivateDir&&) = delete;
  ~PrivateDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  explicit PrivateDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The first lines gnuplot printed, for an error message.
std::string LogHead(const std::string& log_path) {
  auto log = ReadBoundedFile(log_path, 1u << 20, "gnuplot log");
  if (!log.ok() || log->empty()) return "";
  std::string head = log->substr(0, 400);
  for (char& c : head) {
    if (c == '\n') c = ' ';
  }
  return ": " + head;
}

}  // namespace

Status DrawSvgWithGnuplot(const std::string& script, const std::string& svg_path, const std::string& what) {
  if (!OnPath("gnuplot")) {
    return Status::NotSupported("gnuplot is not installed (Debian package gnuplot-nox); no " + what);
  }
  KVTIER_ASSIGN_OR_RETURN(PrivateDir dir, PrivateDir::Make());
  {
    std::ofstream out(dir / "plot.gp", std::ios::binary);
    out << script;
    if (!out.flush()) return Status::IOError("write the gnuplot script in " + dir.path());
  }
  const std::string log = dir / "gnuplot.log";
  const Status ran = RunProcess({"gnuplot", "plot.gp"}, dir.path(), log);
  if (!ran.ok()) return Status::IOError("gnuplot failed to draw " + svg_path + LogHead(log));
  auto svg = ReadBoundedFile(dir / kGnuplotScratchSvg, kMaxGnuplotSvgBytes, "gnuplot's " + what);
  if (!svg.ok()) return Status::IOError("gnuplot drew no " + what + " for " + svg_path + ": " + svg.status().message());
  return WriteOutputFile(svg_path, *svg, what);
}

}  // namespace kvtier::internal
