// SPDX-License-Identifier: MIT
// A job in which one rank throws while the others wait in a gradient all-reduce: run through
// distributed::run, the whole job must end at once with a non-zero status (the ctest
// distributed.throwing_rank_fails_promptly checks the status, the message and the time).
//
//   mpiexec -n 2 throwing_rank [RANK]     RANK (default 1) throws at its third step
#include <headwise/distributed/communicator.hpp>
#include <headwise/distributed/data_parallel.hpp>
#include <headwise/distributed/environment.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/random.hpp>

#include <cstdlib>    // std::atoi
#include <stdexcept>  // std::runtime_error
#include <string>     // std::to_string

int main(int argc, char** argv) {
    const int thrower = argc > 1 ? std::atoi(argv[1]) : 1;
    return headwise::distributed::run(argc, argv, [&](headwise::distributed::Communicator& world) {
        headwise::Generator rng(1);
        headwise::Linear<float> model(16, 16, true, rng);
        headwise::distributed::DataParallel<float> dp(world, model.parameters());
        // The others would wait for the thrower's next all-reduce for ever; an hour of steps
        // stands for that (the test's timeout is far shorter).
        for (long step = 0; step < 1000000000L; ++step) {
            if (world.rank() == thrower && step == 2)
                throw std::runtime_error("planted failure at step " + std::to_string(step));
            dp.average_gradients();
        }
        return 0;
    });
}
