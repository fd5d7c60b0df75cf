# SPDX-License-Identifier: MIT
# How headwise's tests and examples start MPI jobs (HEADWISE_WITH_MPI builds only).
#
# headwise_mpi_command(<out_var> <ranks> <program> [args...]): the command that runs <program>
# (a target name or a path) on <ranks> processes with the launcher FindMPI found. Open MPI gets
# --oversubscribe, so that a job may have more ranks than the machine has cores.
#
# headwise_mpi_test_properties(<test>...): what every MPI test needs: Open MPI refuses to start
# as root unless told (CI containers run as root), and in AddressSanitizer builds LeakSanitizer
# reads tests/distributed/lsan.supp, which suppresses the allocations MPI itself never frees (a
# leak whose stack passes through headwise code alone is still reported).
include_guard(GLOBAL)

set(HEADWISE_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
# Which MPI: the launcher says (FindMPI's MPI_CXX_LIBRARY_VERSION_STRING is not always set).
execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version
                OUTPUT_VARIABLE _headwise_mpiexec_version ERROR_QUIET TIMEOUT 30)
if(_headwise_mpiexec_version MATCHES "Open MPI|OpenRTE")
  list(APPEND HEADWISE_MPIEXEC_PREFLAGS --oversubscribe)
endif()

function(headwise_mpi_command out_var ranks program)
  set(${out_var} "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} ${ranks}
      ${HEADWISE_MPIEXEC_PREFLAGS} ${program} ${MPIEXEC_POSTFLAGS} ${ARGN} PARENT_SCOPE)
endfunction()

function(headwise_mpi_test_properties)
  set(_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
           OMPI_MCA_rmaps_base_oversubscribe=1)
  if(HEADWISE_SANITIZERS MATCHES "address")
    # Suppressions match a leak by the libraries on its allocation stack, so the stack must be
    # whole (the slow unwinder: Open MPI is built without frame pointers) and its libraries
    # named (Open MPI unloads its components before LeakSanitizer runs, unless told not to).
    list(APPEND _env
         "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/distributed/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0"
         OMPI_MCA_mca_base_component_disable_dlclose=1)
  endif()
  set_tests_properties(${ARGN} PROPERTIES ENVIRONMENT "${_env}" PROCESSORS 2 LABELS mpi)
endfunction()
