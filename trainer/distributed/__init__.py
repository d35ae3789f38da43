"""Where this process sits in the job and how it joins the others: environment, node lists, ranks, process set-up."""
