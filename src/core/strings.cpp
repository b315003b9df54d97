#include "drtrain/core/strings.hpp"

#include <cstdio>

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
