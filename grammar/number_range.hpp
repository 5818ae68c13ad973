#pragma once
/// Decimal numbers within bounds, as grammar expressions (JSON Schema minimum / maximum /
/// exclusiveMinimum / exclusiveMaximum). Numbers are written as JSON writes them: no leading
/// zeros, no "-0", and no exponent when bounded.
#include <cstdint>
#include <optional>

#include "grammar/grammar.hpp"

namespace actorserve::grammar {

/// One side of a range of numbers; an integer value.
struct number_bound {
  int64_t value = 0;
  bool exclusive = false;
};

/// The integers in [lo, hi] (nullopt: unbounded on that side). never() when empty.
expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
/// The JSON numbers (integral or with a fraction) within the bounds, at least one of them given
/// (json_rules::number() is the unbounded case). never() when empty.
expr number_range(std::optional<number_bound> lo, std::optional<number_bound> hi);

}  // namespace actorserve::grammar
