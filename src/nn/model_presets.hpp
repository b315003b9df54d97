// The preset models: models/*.model, compiled into the library (model_presets.cpp is generated
// by cmake/EmbedModels.cmake), so that a preset needs no file at run time and every preset is
// also an example of the format.
#pragma once

#include <string>
#include <vector>

namespace drt::nn::presets {

struct Preset {
  std::string name;  // the file's name without .model
  std::string text;
};

const std::vector<Preset>& all();

}  // namespace drt::nn::presets
