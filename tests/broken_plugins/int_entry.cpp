// The entry point's name on an `int`, not on a function: calling it would jump into data.
extern "C" __attribute__((visibility("default"))) int growformer_plugin_info = 42;
