// Text from a file, a key or the network made safe to print on an operator's terminal: what kvtier
// prints from such a source goes through TerminalSafe, so a planted NAMESPACE file cannot set the
// window title, clear the screen or rewrite figures (docs/security.md, issue 39).
//
// Kept as they are: printable ASCII other than '\', and well-formed UTF-8 of a code point at or above
// U+00A0 that is not a line/paragraph separator or a bidirectional control (U+2028..U+202E,
// U+2066..U+2069). Everything else (C0 and C1 controls, DEL, malformed UTF-8) is written as \xNN per
// byte, and '\' as \\, so the escaped text is unambiguous. Thread-safe (a pure function).
#pragma once

#include <string>
#include <string_view>

namespace kvtier::internal {

std::string TerminalSafe(std::string_view text);

}  // namespace kvtier::internal
