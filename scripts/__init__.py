"""Tools of the source tree: the README's two commands (run_main.sh, run_tests.sh), the throwaway PostgreSQL server
of the tests and benchmarks, and the GPU machine's collection and checks."""
