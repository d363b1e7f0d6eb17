// The data layer in one include: datasets (dataset.h), the loader (loader.h), image files
// (image.h). See each header for what it does and does not do.
#pragma once
#include "reckon/data/dataset.h"
#include "reckon/data/image.h"
#include "reckon/data/loader.h"
