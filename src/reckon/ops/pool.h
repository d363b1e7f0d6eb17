#pragma once
#include "reckon/ops/op.h"
#define RK_POOL_OPS(X)
