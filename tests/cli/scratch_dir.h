// SPDX-License-Identifier: Apache-2.0
// A fresh temporary directory per test, named after the process and the test, removed afterwards.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace fieldfuse::cli {

class ScratchDirTest : public ::testing::Test {
 protected:
  /// `prefix` tells whose directory it is, e.g. "fieldfuse_mrc".
  explicit ScratchDirTest(const std::string& prefix) : prefix_(prefix) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + "_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace fieldfuse::cli
