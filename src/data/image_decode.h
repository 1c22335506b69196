// PNG and JPEG decoding through the system's libpng and libjpeg(-turbo). The format
// is taken from the file's magic bytes, not its name. Corrupt or truncated files
// are errors (libjpeg's "premature end of data" warnings too, as Pillow refuses
// truncated images by default); the libraries never print to the terminal.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "data/preprocess.h"

namespace seqto::data {

// Largest image accepted (a corrupt header must not make us allocate gigabytes).
constexpr int64_t kMaxImageSide = 1 << 15;
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// True if the bytes start like a PNG or a JPEG.
bool LooksLikeImage(const std::string& bytes);

// Decodes to 8-bit pixels with `channels` channels: 1 (gray; color images are
// converted like Pillow's convert("L")), 3 (RGB; gray images are replicated), or 0
// (as the file is: gray stays gray, anything else becomes RGB). Alpha is dropped,
// palettes are expanded, 16-bit samples are reduced to 8 bits. Errors start with
// `name`: "x.png: truncated PNG (...)".
Expected<Image> DecodeImage(const std::string& bytes, int channels, const std::string& name);
// Reads and decodes a file.
Expected<Image> ReadImageFile(const std::string& path, int channels);

// Channels to decode for a color mode: gray 1, rgb/bgr 3, auto 0.
int ChannelsFor(ColorMode color);

}  // namespace seqto::data
