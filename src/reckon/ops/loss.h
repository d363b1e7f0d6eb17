#pragma once
#include "reckon/ops/op.h"
#define RK_LOSS_OPS(X)
