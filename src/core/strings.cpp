#include "drtrain/core/strings.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "drtrain/core/error.hpp"

namespace drt {

std::string human_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kUnits[unit]);
  return buf;
}

std::string shortest(double value) {
  char buf[64];
  if (std::abs(value) < 1e15 && value == std::floor(value)) {  // whole numbers as such: 300, not 3e+02
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    if (std::strtod(buf, nullptr) == value) break;  // NaN never compares equal: 17 digits ("nan")
  }
  std::string text = buf;
  const std::size_t e = text.find('e');  // 1e-08 -> 1e-8, as a user writes it
  if (e != std::string::npos) {
    std::size_t digit = e + 1 + (text[e + 1] == '-' || text[e + 1] == '+' ? 1 : 0);
    while (digit + 1 < text.size() && text[digit] == '0') text.erase(digit, 1);
    if (text[e + 1] == '+') text.erase(e + 1, 1);
  }
  return text;
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string item;
  for (char ch : text + sep) {
    if (ch == sep) {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else if (ch != ' ' && ch != '\t') {
      item += ch;
    }
  }
  return out;
}

std::vector<std::string> split_exact(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (std::size_t at; (at = text.find(sep, from)) != std::string::npos; from = at + sep.size())
    out.push_back(text.substr(from, at - from));
  out.push_back(text.substr(from));
  return out;
}

long long parse_count(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  long long value = -1;
  try {
    if (!text.empty() && text[0] >= '0' && text[0] <= '9') value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0) throw ConfigError(str(what, ": '", text, "' is not a non-negative integer"));
  return value;
}

}  // namespace drt
