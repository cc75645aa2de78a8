// TEMPORARY: replaced by the real cpu implementation.
#include "ops/op.h"
#include "ops/ragged_dot/base.h"
namespace tokamax {
const Implementation& ragged_dot_reference_implementation();
const Implementation& ragged_dot_cpu_implementation() { return ragged_dot_reference_implementation(); }
}
