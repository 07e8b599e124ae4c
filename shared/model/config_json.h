// The JSON object of a release's config.json, parsed once with errors that name the source;
// shared by the text config (config.h) and the vision config (vision_config.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace waste {

// Throws Error("SOURCE: not valid JSON: ...") or ("SOURCE: expected a JSON object").
nlohmann::json parse_config_object(const std::string& json_text, const std::string& source);

}  // namespace waste
