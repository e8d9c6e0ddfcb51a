#pragma once
// Building files byte by byte, for the reader tests.
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace vkattn::testing {

inline std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// The little-endian bytes of `values` (the host is little-endian; the readers assert it).
template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(values), s.size());
  return s;
}

}  // namespace vkattn::testing
