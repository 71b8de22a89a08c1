#include "tools/command.h"

int main(int argc, char** argv) { return kvtier::tools::RunCli(argc, argv); }
