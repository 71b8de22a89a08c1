#include "tools/command.h"

#if defined(__SANITIZE_ADDRESS__)
// ASan builds only: LeakSanitizer's scan at exit costs ~1.5 s per `kvtier` process (measured on the
// 2-core development VM: `kvtier report` of a bad file, 2.3 s with it, 0.8 s without), and the CLI
// tests start the binary hundreds of times: about half of the ASan suite's test time went to those scans.
// The leak check still runs in every test binary, where the library code the commands call lives.
// (LeakSanitizer's documented hook; it must return a constant.)
extern "C" int __lsan_is_turned_off() { return 1; }
#endif

int main(int argc, char** argv) { return kvtier::tools::RunCli(argc, argv); }
