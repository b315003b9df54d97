// JsonLine: builds one JSON object on one line, for metrics files and summary lines.
//   JsonLine().add("step", 12).add("loss", 0.25).add("model", "mlp").str()
//   == {"step":12,"loss":0.25,"model":"mlp"}
// Non-finite numbers are written as null (JSON has no NaN).
#pragma once

#include <cstdint>
#include <string>

namespace drt {

class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, std::int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  JsonLine& add(const std::string& key, bool value);
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  // A nested object given as the text of another JsonLine.
  JsonLine& add_object(const std::string& key, const JsonLine& value);
  // add(key, value) when `when` holds (fields only some runs have).
  JsonLine& add_if(bool when, const std::string& key, double value) { return when ? add(key, value) : *this; }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonLine& raw(const std::string& key, const std::string& text);
  std::string body_;
};

std::string json_escape(const std::string& text);

}  // namespace drt
