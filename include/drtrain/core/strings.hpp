// Small string helpers: concatenation of streamable values and human-readable sizes.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace drt {

// str("step ", 3, " of ", 10) == "step 3 of 10"
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// "1.50 MiB", "12.0 GiB", "512 B"
std::string human_bytes(double bytes);

// shortest(0.05) == "0.05": the shortest text that reads back as the same double (%g with the
// fewest digits that round-trip), as a user would write it; not 0.050000000000000003.
std::string shortest(double value);

// fixed(3.14159, 2) == "3.14"
std::string fixed(double value, int decimals);

// join({"a","b"}, ", ") == "a, b"
std::string join(const std::vector<std::string>& parts, const std::string& sep);

// split_list("a, b,,c", ',') == {"a", "b", "c"}: items without blanks, empty ones dropped.
std::vector<std::string> split_list(const std::string& text, char sep);

// split_exact("a; ; b", "; ") == {"a", "", "b"}: every piece between separators, empty ones
// kept (split_exact("", ";") == {""}).
std::vector<std::string> split_exact(const std::string& text, const std::string& sep);

// Parses a non-negative integer; throws ConfigError naming `what` on anything else.
long long parse_count(const std::string& text, const std::string& what);

}  // namespace drt
