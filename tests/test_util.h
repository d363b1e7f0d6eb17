// Helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "reckon/core/error.h"

namespace reckon::test_util {

// The message of the reckon::Error f throws; "" and a test failure if it throws none or throws
// something else.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a reckon::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

}  // namespace reckon::test_util
