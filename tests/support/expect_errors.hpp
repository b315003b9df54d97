// Test helpers for error messages: EXPECT_CONTAINS(text, part) and config_error_of(fn), which runs
// fn and returns the message of the ConfigError it throws (a test failure, and "", when it throws
// nothing or something else).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "drtrain/core/error.hpp"

namespace drt::testing_support {

inline ::testing::AssertionResult contains(const char* text_expr, const char* part_expr, const std::string& text,
                                           const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text_expr << " does not contain " << part_expr << "\n  text: " << text
                                       << "\n  part: " << part;
}

template <typename Fn>
std::string config_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ConfigError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return "";
}

}  // namespace drt::testing_support

// `part` occurs in `text` (GoogleTest without gmock).
#define EXPECT_CONTAINS(text, part) EXPECT_PRED_FORMAT2(::drt::testing_support::contains, text, part)
