"""Scale-out across machines: a command's N array tasks run on an existing engine (Ray, or
local subprocesses), with retries (`llmtk run`). Not a scheduler: the engine schedules;
the tasks' completion markers make retries and reruns safe."""
