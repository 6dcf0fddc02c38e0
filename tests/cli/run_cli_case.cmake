# SPDX-License-Identifier: Apache-2.0
# Runs the fieldfuse binary once and checks its exit code, its error message and, optionally, the
# PSNR gain in its JSON report. Invoked as a CTest command through `cmake -P`.
#
#   -DEXE=path          the fieldfuse binary
#   -DARGS=a|b|c        its arguments, separated by '|' (CTest would split ';')
#   -DWORKDIR=dir       where to run it
#   -DEXPECT_EXIT=n     the expected exit code (default 0)
#   -DEXPECT_STDERR=re  a regular expression stderr must match (optional)
#   -DEXPECT_STDOUT=re  a regular expression stdout must match (optional)
#   -DREPORT=path       a JSON report whose metrics must show psnr_denoised > psnr_noisy (optional)
#   -DTOMO_REPORT=path  a `tomo` report in which every method's PSNR beats the plain back
#                       projection's and every logged loss series (K-Planes) decreases (optional)
cmake_minimum_required(VERSION 3.19)  # string(JSON)

if(NOT DEFINED EXPECT_EXIT)
  set(EXPECT_EXIT 0)
endif()
string(REPLACE "|" ";" arg_list "${ARGS}")
file(MAKE_DIRECTORY "${WORKDIR}")
execute_process(
  COMMAND "${EXE}" ${arg_list}
  WORKING_DIRECTORY "${WORKDIR}"
  RESULT_VARIABLE exit_code
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message(STATUS "fieldfuse ${arg_list}\n--- stdout ---\n${out}--- stderr ---\n${err}--- exit ${exit_code}")

if(NOT exit_code STREQUAL "${EXPECT_EXIT}")
  message(FATAL_ERROR "expected exit code ${EXPECT_EXIT}, got '${exit_code}'")
endif()
if(DEFINED EXPECT_STDERR AND NOT err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "stderr does not match '${EXPECT_STDERR}'")
endif()
if(DEFINED EXPECT_STDOUT AND NOT out MATCHES "${EXPECT_STDOUT}")
  message(FATAL_ERROR "stdout does not match '${EXPECT_STDOUT}'")
endif()
if(NOT EXPECT_EXIT EQUAL 0 AND NOT err MATCHES "^fieldfuse[a-z ]*: error: ")
  message(FATAL_ERROR "a failure must print 'fieldfuse ...: error: <what>' on stderr")
endif()

# A decimal number in hundredths, for CMake's integer comparisons.
function(to_centi value out)
  if(NOT "${value}" MATCHES "^(-?[0-9]+)(\\.([0-9]*))?$")
    message(FATAL_ERROR "'${value}' is not a plain decimal")
  endif()
  string(SUBSTRING "${CMAKE_MATCH_3}00" 0 2 hundredths)
  set(${out} "${CMAKE_MATCH_1}${hundredths}" PARENT_SCOPE)
endfunction()

if(DEFINED TOMO_REPORT)
  file(READ "${WORKDIR}/${TOMO_REPORT}" report)
  string(JSON baseline GET "${report}" plain_backprojection psnr_db)
  to_centi("${baseline}" baseline_centi)
  string(JSON count LENGTH "${report}" methods)
  if(count EQUAL 0)
    message(FATAL_ERROR "the report lists no method")
  endif()
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${report}" methods ${i} method)
    string(JSON psnr GET "${report}" methods ${i} metrics psnr_db)
    message(STATUS "${name}: PSNR ${psnr} dB, plain back projection ${baseline} dB")
    to_centi("${psnr}" psnr_centi)
    if(NOT psnr_centi GREATER baseline_centi)
      message(FATAL_ERROR "${name} (${psnr} dB) does not beat the plain back projection (${baseline} dB)")
    endif()
    string(JSON losses ERROR_VARIABLE no_loss GET "${report}" methods ${i} loss)
    if(NOT no_loss)
      string(JSON logged LENGTH "${report}" methods ${i} loss)
      math(EXPR final "${logged} - 1")
      string(JSON first GET "${report}" methods ${i} loss 0)
      string(JSON last GET "${report}" methods ${i} loss ${final})
      message(STATUS "${name}: loss ${first} -> ${last} over ${logged} records")
      if(logged LESS 2)
        message(FATAL_ERROR "${name}: fewer than two logged losses")
      endif()
      if(NOT last LESS first)  # if() compares decimal and exponent forms as doubles
        message(FATAL_ERROR "${name}: the loss did not decrease (${first} -> ${last})")
      endif()
    endif()
  endforeach()
endif()

if(DEFINED REPORT)
  file(READ "${WORKDIR}/${REPORT}" report)
  string(JSON psnr_noisy GET "${report}" metrics psnr_noisy)
  string(JSON psnr_denoised GET "${report}" metrics psnr_denoised)
  string(JSON ssim_noisy GET "${report}" metrics ssim_noisy)
  string(JSON ssim_denoised GET "${report}" metrics ssim_denoised)
  message(STATUS "PSNR ${psnr_noisy} -> ${psnr_denoised} dB, SSIM ${ssim_noisy} -> ${ssim_denoised}")
  # CMake's if() compares only integers, so compare in hundredths of a dB.
  to_centi("${psnr_noisy}" psnr_noisy_centi)
  to_centi("${psnr_denoised}" psnr_denoised_centi)
  if(NOT psnr_denoised_centi GREATER psnr_noisy_centi)
    message(FATAL_ERROR "denoising did not raise PSNR: ${psnr_noisy} -> ${psnr_denoised} dB")
  endif()
  foreach(suffix npy png json)
    string(REGEX REPLACE "\\.json$" ".${suffix}" output "${WORKDIR}/${REPORT}")
    if(NOT EXISTS "${output}")
      message(FATAL_ERROR "missing output ${output}")
    endif()
  endforeach()
endif()
