#include "drtrain/core/json_line.hpp"

#include <cmath>
#include <cstdio>

namespace drt {

std::string json_escape(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

JsonLine& JsonLine::raw(const std::string& key, const std::string& text) {
  if (!body_.empty()) body_ += ",";
  body_ += json_escape(key) + ":" + text;
  return *this;
}

JsonLine& JsonLine::add(const std::string& key, double value) {
  if (!std::isfinite(value)) return raw(key, "null");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", value);  // 10 digits: microsecond times of hours-long runs
  return raw(key, buf);
}

JsonLine& JsonLine::add(const std::string& key, std::int64_t value) { return raw(key, std::to_string(value)); }
JsonLine& JsonLine::add(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
JsonLine& JsonLine::add(const std::string& key, const std::string& value) { return raw(key, json_escape(value)); }
JsonLine& JsonLine::add_object(const std::string& key, const JsonLine& value) { return raw(key, value.str()); }

}  // namespace drt
