# A run's greedy evaluations as a curve `cumind plot` reads beside the peers' (the header
# env_steps,wall_seconds,mean_return,std_return and one row per evaluation):
#
#   awk -f scripts/eval_curve.awk runs/<run>/metrics.csv > curve.csv
#
# wall_seconds is the run's clock at its last progress row before the evaluation. A resumed
# run logs again the steps after its checkpoint: the later rows replace the earlier ones.
BEGIN { FS = ","; OFS = "," }
$1 == "progress/elapsed_seconds" { clock = $3 }
$1 == "eval/mean_return" {
    if (!($2 in mean)) order[++n] = $2
    mean[$2] = $3
    wall[$2] = clock
}
$1 == "eval/std_return" { std[$2] = $3 }
END {
    print "env_steps,wall_seconds,mean_return,std_return"
    for (i = 1; i <= n; i++) {
        step = order[i]
        print step, wall[step], mean[step], std[step]
    }
}
