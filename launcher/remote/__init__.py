"""The SSH transport (a profile with `login:`, docs/remote.md): the one shared connection
(`connection`), the cluster side's folders named in one place (`folders`), the profile, jobs and folders
as they are there (`cluster_side`), content-addressed sync of the code and your project (`sync`), the
steps of a submission over SSH (`transport`: preflight, the submission shipped as JSON), the local
record of a run submitted so (`ssh_record`: remote.json and its one typed reader) and the operating
commands run there (`relay`). It never prints: each step returns data or raises a ConfigError."""
