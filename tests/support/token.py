"""The job token of the test harnesses' jobs.

A job's token is never 0 (issue 33, 7: the switch and the workers refuse 0, the value of a
header nobody filled in), so the harnesses that install jobs themselves, without the
controller drawing one, give them this one; packets and workers of those jobs carry it.
"""

#: ``set_job.token`` of every job a harness installs (nonzero, all four bytes distinct so that
#: a byte-order slip shows)
TOKEN = 0x7E57_0B1D
