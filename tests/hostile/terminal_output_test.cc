// Issue 39, item 7: what kvtier prints that came from a file, a key or the network is escaped for the
// terminal. A co-tenant plants NAMESPACE descriptors holding ESC/BEL sequences (window title, clear
// screen), UTF-8 C1 controls and a bidi override; `kvtier inspect` (text and --json) prints none of those
// bytes raw.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/terminal_text.h"
#include "hostile/cli_runner.h"
#include "hostile/hostile_util.h"
#include "kvtier/engine_identity.h"
#include "support/temp_dir.h"

namespace kvtier::testing {
namespace {

using internal::TerminalSafe;

// True when `text` holds a byte or sequence a terminal acts on: a C0 control other than newline and
// tab, DEL, a UTF-8 C1 control (U+0080..U+009F), a bidi override or isolate.
bool DrivesATerminal(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) return true;
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (b == 0xC2 && next >= 0x80 && next <= 0x9F) return true;
    if (b == 0xE2 && text.compare(i, 3, "\xE2\x80\xAE") == 0) return true;
    if (b == 0xE2 && text.compare(i, 3, "\xE2\x81\xA6") == 0) return true;
  }
  return false;
}

TEST(TerminalOutputIsEscaped, TerminalSafeEscapesControlsAndKeepsText) {
  EXPECT_EQ(TerminalSafe("llama-3 8b"), "llama-3 8b");
  EXPECT_EQ(TerminalSafe("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(TerminalSafe("a\\x1b"), "a\\\\x1b") << "a literal backslash stays distinguishable";
  EXPECT_EQ(TerminalSafe("\xC2\x9B" "2J"), "\\xc2\\x9b2J") << "UTF-8 C1 CSI";
  EXPECT_EQ(TerminalSafe("\xE2\x80\xAE" "cba"), "\\xe2\\x80\\xaecba") << "bidi override";
  EXPECT_EQ(TerminalSafe("\x7f\xff\xc3"), "\\x7f\\xff\\xc3") << "DEL, malformed and cut UTF-8";
  EXPECT_EQ(TerminalSafe("caf\xC3\xA9 \xE6\xA8\xA1\xE5\x9E\x8B"), "caf\xC3\xA9 \xE6\xA8\xA1\xE5\x9E\x8B");
  EXPECT_EQ(TerminalSafe(std::string("a\0b\nc", 5)), "a\\x00b\\x0ac");
  EXPECT_FALSE(DrivesATerminal(TerminalSafe("\x1b[2J\x07\x9b\xC2\x85\xE2\x81\xA6")));
}

TEST(TerminalOutputIsEscaped, InspectPrintsNoPlantedControlBytes) {
  TempDir dir, logs;
  const Namespace ns_a = *Namespace::Make("model-a", Layout{1, 1, 4, DType::kBF16, 1}, "tenant");
  const Namespace ns_b = *Namespace::Make("model-b", Layout{1, 1, 4, DType::kBF16, 1}, "tenant");
  {
    auto t = OpenKind(Kind::kFile, dir.path());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(PutNo(**t, ns_a, 1).ok());
    ASSERT_TRUE(PutNo(**t, ns_b, 1).ok());
    const std::string version(EngineIdentity::kVersionLine);
    // A field name with an OSC title sequence and a bell: refused by the parser, whose message names it.
    ASSERT_TRUE((*t)->DescribeNamespace(ns_a.id(), version + "\n\x1b]0;owned\x07\x1b[2J=1\n").ok());
    // Values the parser accepts (no C0 control), holding a UTF-8 CSI and a bidi override.
    ASSERT_TRUE((*t)->DescribeNamespace(ns_b.id(), version + "\nengine=vllm\nmodel=\xC2\x9B" "2J\xE2\x80\xAE" "x\n").ok());
  }
  for (const bool json : {false, true}) {
    std::vector<std::string> args = {"inspect", "--target", "file://" + dir.path()};
    if (json) args.push_back("--json");
    const CliResult r = RunKvtier(args, logs.path() + "/inspect.log");
    ASSERT_TRUE(r.exited) << r.output;
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(DrivesATerminal(r.output)) << (json ? "--json: " : "text: ") << TerminalSafe(r.output);
    EXPECT_NE(r.output.find("owned"), std::string::npos) << "the refused descriptor was not shown at all";
    EXPECT_NE(r.output.find("vllm"), std::string::npos) << "the accepted descriptor was not shown at all";
  }
}

}  // namespace
}  // namespace kvtier::testing
