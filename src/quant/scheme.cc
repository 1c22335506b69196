// Placeholder: the calibration helper replaces this file with the scheme implementation.
#include "quant/scheme.h"
