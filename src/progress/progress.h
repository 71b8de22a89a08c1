// Progress of a long run (benches, replay, e2e): a status line that does not fill a log.
//
// On a terminal the status is one live line, redrawn in place ("\r" + clear to end of line) at most
// every `live_interval`; anywhere else (a pipe, a file, CI) a status is written as its own line at most
// every `log_interval` (10 s by default), so a ten-minute run writes about sixty lines, not thousands.
// Note() writes a line that always appears (phase changes, results); Done() ends the live line.
//
// Thread-safe: Update/Note/Done may be called from many threads at once. The stream must outlive the
// reporter. The clock is injectable so tests are deterministic.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>

#include "core/thread_annotations.h"

namespace kvtier::internal {

struct ProgressOptions {
  bool live = false;                                   // redraw one line in place (a terminal)
  std::chrono::duration<double> log_interval{10.0};    // not live: at most one status line per this
  std::chrono::duration<double> live_interval{0.2};    // live: at most one redraw per this
  std::function<double()> now_seconds;                 // empty: a steady clock
};

class ProgressReporter {
 public:
  // `out` may be null: everything is dropped.
  ProgressReporter(std::ostream* out, ProgressOptions options);
  // Writes to std::cerr, live when stderr is a terminal.
  static ProgressReporter ForStderr();
  // Live when `out` is std::cerr and stderr is a terminal.
  static ProgressReporter For(std::ostream* out);
  ~ProgressReporter();

  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  ProgressReporter(ProgressReporter&&) = delete;

  // The current status, e.g. "file c=4: 12/40 requests". Written only when due (see above); the first
  // status is written at once.
  void Update(const std::string& status) EXCLUDES(mu_);
  // A line that is always written (it first ends a live status line).
  void Note(const std::string& line) EXCLUDES(mu_);
  // Ends a live status line with a newline; nothing otherwise. Called by the destructor.
  void Done() EXCLUDES(mu_);

 private:
  double Now() const;
  void EndLiveLine() REQUIRES(mu_);

  std::ostream* const out_;
  const ProgressOptions options_;
  Mutex mu_;
  bool shown_ GUARDED_BY(mu_) = false;       // a status was written since the last Note/Done
  bool live_open_ GUARDED_BY(mu_) = false;   // the cursor is at the end of a live status line
  double last_ GUARDED_BY(mu_) = 0;          // when the last status was written
};

}  // namespace kvtier::internal
