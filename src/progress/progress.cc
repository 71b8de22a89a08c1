#include "progress/progress.h"

#include <unistd.h>

#include <iostream>

namespace kvtier::internal {

ProgressReporter::ProgressReporter(std::ostream* out, ProgressOptions options)
    : out_(out), options_(std::move(options)) {}

ProgressReporter ProgressReporter::ForStderr() { return For(&std::cerr); }

ProgressReporter ProgressReporter::For(std::ostream* out) {
  ProgressOptions o;
  o.live = out == &std::cerr && isatty(STDERR_FILENO) == 1;
  return ProgressReporter(out, o);
}

ProgressReporter::~ProgressReporter() { Done(); }

double ProgressReporter::Now() const {
  if (options_.now_seconds) return options_.now_seconds();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ProgressReporter::EndLiveLine() {
  if (live_open_) *out_ << "\n";
  live_open_ = false;
}

void ProgressReporter::Update(const std::string& status) {
  if (out_ == nullptr) return;
  MutexLock lock(mu_);
  const double now = Now();
  const double interval = (options_.live ? options_.live_interval : options_.log_interval).count();
  if (shown_ && now - last_ < interval) return;
  shown_ = true;
  last_ = now;
  if (options_.live) {
    *out_ << "\r\x1b[K" << status << std::flush;  // carriage return, clear to end of line
    live_open_ = true;
  } else {
    *out_ << status << std::endl;
  }
}

void ProgressReporter::Note(const std::string& line) {
  if (out_ == nullptr) return;
  MutexLock lock(mu_);
  EndLiveLine();
  *out_ << line << std::endl;
  // The next status shows at once: it starts a new phase's count.
  shown_ = false;
}

void ProgressReporter::Done() {
  if (out_ == nullptr) return;
  MutexLock lock(mu_);
  EndLiveLine();
  *out_ << std::flush;
  shown_ = false;
}

}  // namespace kvtier::internal
