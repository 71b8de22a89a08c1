// Drawing an SVG with gnuplot through the one writer of user files (core/output_file.h).
//
// gnuplot never writes a user's path itself: it runs in a new private directory (mkdtemp, mode 0700,
// under the system's temporary directory) on a script that sets its output to kGnuplotScratchSvg
// there; the SVG it made is read back under a bound and written to the destination by
// WriteOutputFile (a new temporary beside it, then rename; a link, FIFO or directory at the
// destination is refused, never followed). The private directory is removed whatever happens.
// Thread-safe (each call has its own directory); blocks while gnuplot runs.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::internal {

// The name, relative to gnuplot's working directory, that a script given to DrawSvgWithGnuplot
// must `set output` to.
inline constexpr const char* kGnuplotScratchSvg = "plot.svg";
// The largest SVG read back from gnuplot.
inline constexpr uint64_t kMaxGnuplotSvgBytes = 64ull << 20;

// Runs gnuplot on `script` and writes the SVG it draws to `svg_path` (`what` names it in messages).
// NotSupported when gnuplot is not installed; IOError when it fails or draws nothing (its first
// output lines are in the message); InvalidArgument when `svg_path` is not a regular file or absent.
Status DrawSvgWithGnuplot(const std::string& script, const std::string& svg_path, const std::string& what);

}  // namespace kvtier::internal
