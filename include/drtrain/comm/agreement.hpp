// Agreement between ranks on verdicts and configuration, so that an error seen by some ranks
// becomes the same ConfigError on every rank (clean exit, no abort, no hang).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "drtrain/comm/comm.hpp"

namespace drt::comm {

// Collective. If any rank passes an error, every rank throws ConfigError with the message of
// the lowest such rank (prefixed with that rank when more than one rank took part).
void raise_if_any(const Comm& comm, const std::optional<std::string>& local_error);

// Collective. Throws ConfigError on every rank when ranks hold different `fingerprint`s of
// what should be one shared value (`what`, e.g. "the configuration").
void require_same(const Comm& comm, std::uint64_t fingerprint, const std::string& what);

// Collective. `text` of rank `root` on every rank of `comm` (its size first, then its bytes).
std::string broadcast_text(const Comm& comm, int root, std::string text);

// FNV-1a, for fingerprints of text.
std::uint64_t fingerprint(const std::string& text);

}  // namespace drt::comm
