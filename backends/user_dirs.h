// Per-user folders: where the user cache (autotuning entries, measured ceilings) lives.
#pragma once

#include <string>

namespace tokamax {

// $XDG_CACHE_HOME/tokamax when XDG_CACHE_HOME is an absolute path, else ~/.cache/tokamax (the
// home directory from $HOME, else the password database). Throws std::runtime_error when
// neither locates it.
std::string user_cache_dir();

}  // namespace tokamax
