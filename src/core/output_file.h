// The one writer of files kvtier writes for a user (report.md, gnuplot scripts, JSON results): the
// text goes to a new temporary file beside the destination (created O_EXCL | O_NOFOLLOW, mode 0644),
// which is then renamed over it. Nothing is ever written through a link: a destination that exists
// and is not a regular file (a symbolic link, a FIFO, a directory) is refused before anything is
// written, and a reader never sees a half-written file. Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::internal {

// InvalidArgument when `path` exists and is not a regular file; IOError/NoSpace when writing fails
// (the temporary is removed then). `what` names the file's role in messages, e.g. "report".
Status WriteOutputFile(const std::string& path, std::string_view text, const std::string& what);

}  // namespace kvtier::internal
