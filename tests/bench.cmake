# The statistics behind clpin-bench's figures. (The bench's own smoke run on
# POCL is registered in bench/CMakeLists.txt, next to its target.)
clpin_check_test(check_benchstat LABELS unit SOURCES ${PROJECT_SOURCE_DIR}/bench/benchstat.c
                 ${PROJECT_SOURCE_DIR}/src/size.c)
target_include_directories(check_benchstat PRIVATE ${PROJECT_SOURCE_DIR}/bench)
target_link_libraries(check_benchstat PRIVATE m)
