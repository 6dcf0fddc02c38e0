# SPDX-License-Identifier: Apache-2.0
# Installs the built library into a scratch prefix, then builds and runs the README's C++ example
# as a find_package(fieldfuse) consumer. Run by ctest as `cmake -P` with BUILD_DIR, SOURCE_DIR
# (the repository root) and WORK_DIR set.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "package_test.cmake needs -D${var}=...")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${what} failed (${status}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
endfunction()

# The example is the README's ```cpp block that starts with "// readme-example".
file(READ "${SOURCE_DIR}/README.md" readme)
string(FIND "${readme}" "```cpp\n// readme-example" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "README.md has no ```cpp block starting with // readme-example")
endif()
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${readme}" ${begin} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} example)

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/consumer")
file(WRITE "${WORK_DIR}/consumer/main.cpp" "${example}")
file(WRITE "${WORK_DIR}/consumer/CMakeLists.txt"
  "cmake_minimum_required(VERSION 3.24)\n"
  "project(fieldfuse_consumer LANGUAGES CXX)\n"
  "find_package(fieldfuse 0.1 REQUIRED)\n"
  "add_executable(readme_example main.cpp)\n"
  "target_link_libraries(readme_example PRIVATE fieldfuse::fieldfuse)\n")

run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run_step("configure consumer" ${CMAKE_COMMAND} -S "${WORK_DIR}/consumer" -B "${WORK_DIR}/build"
         "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run_step("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("run the README example" "${WORK_DIR}/build/readme_example")
