#pragma once
// expect_error<E>(f, {fragments…}): `f` must throw E with a one-line message containing every
// fragment (the file, tensor or step at fault, and what was wrong with it).
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

namespace vkattn::testing {

template <class E>
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << *fragments.begin();
  } catch (const E& e) {
    std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

}  // namespace vkattn::testing
