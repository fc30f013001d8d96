// A shared library without the growformer entry point.
extern "C" __attribute__((visibility("default"))) int some_other_function() { return 42; }
