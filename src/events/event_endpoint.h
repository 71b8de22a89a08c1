// The checks an event endpoint passes before ZeroMQ sees it (docs/security.md, "Events"):
//
//  - tcp://HOST:PORT: PORT is `*` (a free port) or a whole number from 0 to 65535 (libzmq would take
//    `99999` modulo 2^16); HOST a loopback address (127.0.0.0/8, ::1, localhost, lo) unless
//    `allow_remote`: the socket has no authentication, so it is exposed only when asked for explicitly.
//  - ipc://PATH: libzmq unlinks PATH before binding. PATH may not exist, or be a socket of this user that
//    nothing listens on (what a kvtier publisher that died leaves); anything else (a file, a folder, a
//    link, another user's socket, a live socket) is refused and left alone. `ipc://@NAME` (abstract) is
//    fine: it has no file.
//  - nothing else (inproc://, pgm://, ws://, ...).
//
// InvalidArgument on a refusal, with the reason.
#pragma once

#include <string>

#include "kvtier/status.h"

namespace kvtier::internal {

Status CheckEventEndpoint(const std::string& endpoint, bool allow_remote);

}  // namespace kvtier::internal
