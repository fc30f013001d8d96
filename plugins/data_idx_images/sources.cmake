# gf_data_idx_images's sources, named once: the plugin (CMakeLists.txt here) and its libFuzzer harness
# (fuzz/CMakeLists.txt) both read this list, so a file added here is built into both
set(GF_IDX_IMAGES_SOURCES ${CMAKE_CURRENT_LIST_DIR}/idx_images.cpp)
