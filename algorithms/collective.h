// The collective operations as the algorithms name them (src/common/collective.h).
#pragma once

#include "common/collective.h"

namespace strata::algorithms {

using strata::Collective;
using strata::collectiveName;

}  // namespace strata::algorithms
