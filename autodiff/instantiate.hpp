// Each ops/*.cpp defines its templates once and instantiates them here for float and double, so users'
// translation units never compile the kernels.
#pragma once

#define XGRAD_INSTANTIATE_FOR_FLOAT_TYPES(MACRO) \
    MACRO(float)                                 \
    MACRO(double)
