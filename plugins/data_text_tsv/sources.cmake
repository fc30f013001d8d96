# gf_data_text_tsv's sources, named once: the plugin (CMakeLists.txt here) and its libFuzzer harness
# (fuzz/CMakeLists.txt) both read this list, so a file added here is built into both
set(GF_TEXT_TSV_SOURCES ${CMAKE_CURRENT_LIST_DIR}/text_tsv.cpp ${CMAKE_CURRENT_LIST_DIR}/text_table.cpp ${CMAKE_CURRENT_LIST_DIR}/text_formats.cpp)
