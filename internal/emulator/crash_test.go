package emulator_test

const childDirEnv = "EFS_EMULATOR_TEST_CHILD_DIR"

func runChildEmulator(dir string) { panic("todo " + dir) }
