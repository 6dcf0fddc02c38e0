// SPDX-License-Identifier: Apache-2.0
// Tests of the all-or-nothing output set and of the refusal to write over an input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "atomic_outputs.h"
#include "cli_error.h"
#include "scratch_dir.h"

namespace fieldfuse::cli {
namespace {

namespace fs = std::filesystem;

class AtomicOutputsTest : public ScratchDirTest {
 protected:
  AtomicOutputsTest() : ScratchDirTest("fieldfuse_outputs") {}
  static void put(const std::string& file, const std::string& text) {
    std::ofstream(file, std::ios::binary) << text;
  }
  static std::string get(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename());
    return names;
  }
  static AtomicOutputs::Writer text(const std::string& content) {
    return [content](OutputStream& out) { out.write(content.data(), content.size()); };
  }
};

TEST_F(AtomicOutputsTest, CommitWritesEveryFileAndLeavesNothingElse) {
  put(path("a.txt"), "old a");
  AtomicOutputs outputs;
  outputs.add(path("a.txt"), text("new a"));
  outputs.add(path("b.txt"), text("new b"));
  outputs.commit();
  EXPECT_EQ(get(path("a.txt")), "new a");
  EXPECT_EQ(get(path("b.txt")), "new b");
  EXPECT_EQ(listing(), (std::set<std::string>{"a.txt", "b.txt"}));
}

// A writer that fails half way (as a full disk does) must leave every target as it was: no
// truncated file, no new file next to old ones, no temporary file.
TEST_F(AtomicOutputsTest, AFailingWriterChangesNothing) {
  put(path("a.txt"), "old a");
  put(path("b.txt"), "old b");
  AtomicOutputs outputs;
  outputs.add(path("a.txt"), text("new a"));
  outputs.add(path("b.txt"), [](OutputStream& out) {
    out.write("half", 4);
    throw runtime_error("cannot write 'b.txt': No space left on device");
  });
  outputs.add(path("c.txt"), text("new c"));
  EXPECT_THROW(outputs.commit(), CliError);
  EXPECT_EQ(get(path("a.txt")), "old a");
  EXPECT_EQ(get(path("b.txt")), "old b");
  EXPECT_EQ(listing(), (std::set<std::string>{"a.txt", "b.txt"}));
}

// When the second rename fails, the first target goes back to its old content.
TEST_F(AtomicOutputsTest, AFailedRenameRestoresTheTargetsAlreadyReplaced) {
  put(path("a.txt"), "old a");
  fs::create_directories(path("b.out/inside"));  // rename(file, non-empty directory) fails
  AtomicOutputs outputs;
  outputs.add(path("a.txt"), text("new a"));
  outputs.add(path("new.txt"), text("new"));
  outputs.add(path("b.out"), text("new b"));
  try {
    outputs.commit();
    FAIL() << "expected an error";
  } catch (const CliError& error) {
    EXPECT_EQ(error.exit_code(), 1);
    EXPECT_NE(std::string(error.what()).find("cannot replace"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("no output was changed"), std::string::npos);
  }
  EXPECT_EQ(get(path("a.txt")), "old a");
  EXPECT_EQ(listing(), (std::set<std::string>{"a.txt", "b.out"}));
}

TEST_F(AtomicOutputsTest, AnOutputThatIsAnInputIsRefusedHoweverSpelled) {
  put(path("x.npy"), "input");
  fs::create_directories(path("sub"));
  fs::create_symlink(path("x.npy"), path("link.npy"));
  fs::create_hard_link(path("x.npy"), path("hard.npy"));
  const auto refused = [&](const std::string& output) {
    try {
      refuse_outputs_that_are_inputs({{"--output", output}}, {{"--input", path("x.npy")}});
    } catch (const CliError& error) {
      EXPECT_EQ(error.exit_code(), 2);
      EXPECT_NE(std::string(error.what()).find("would overwrite --input"), std::string::npos);
      return true;
    }
    return false;
  };
  EXPECT_TRUE(refused(path("x.npy")));
  EXPECT_TRUE(refused(path("sub/../x.npy")));
  EXPECT_TRUE(refused((dir_ / "." / "x.npy").string()));
  EXPECT_TRUE(refused(path("link.npy")));
  EXPECT_TRUE(refused(path("hard.npy")));
  EXPECT_FALSE(refused(path("other.npy")));
  EXPECT_EQ(get(path("x.npy")), "input");
}

}  // namespace
}  // namespace fieldfuse::cli
