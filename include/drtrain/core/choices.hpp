// Named values of enumerated options: one table per enum gives parsing (with an error that lists
// the choices) and printing.
//   constexpr Choice<Placement> kPlacements[] = {{Placement::kFirst, "first"}, ...};
//   parse_choice("first", kPlacements, "--ps-placement");  choice_name(Placement::kFirst, kPlacements)
#pragma once

#include <cstddef>
#include <string>

#include "drtrain/core/error.hpp"

namespace drt {

template <typename E>
struct Choice {
  E value;
  const char* name;
};

template <typename E, std::size_t N>
std::string choice_list(const Choice<E> (&choices)[N]) {
  std::string list;
  for (std::size_t i = 0; i < N; ++i) list += (i ? ", " : "") + std::string(choices[i].name);
  return list;
}

// Throws ConfigError "unknown <flag> '<text>'; choices: a, b, c".
template <typename E, std::size_t N>
E parse_choice(const std::string& text, const Choice<E> (&choices)[N], const char* flag) {
  for (const auto& c : choices)
    if (text == c.name) return c.value;
  throw ConfigError("unknown " + std::string(flag) + " '" + text + "'; choices: " + choice_list(choices));
}

template <typename E, std::size_t N>
std::string choice_name(E value, const Choice<E> (&choices)[N]) {
  for (const auto& c : choices)
    if (c.value == value) return c.name;
  return "?";
}

}  // namespace drt
