// The core's export macros. libgrowformer is built with hidden visibility; each public core
// header brackets its declarations with GROWFORMER_API_BEGIN and GROWFORMER_API_END, which makes
// them the library's exported interface. Helpers private to a source file or a part's private
// header (config_impl.hpp, trainer_impl.hpp, ...) stay hidden. Outside the core's build the
// brackets change nothing.
#pragma once

#define GROWFORMER_API_BEGIN _Pragma("GCC visibility push(default)")
#define GROWFORMER_API_END _Pragma("GCC visibility pop")
