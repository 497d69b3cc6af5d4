# infergate-bulk --concurrency auto: output tokens/s (simulated) and the concurrency held over
# time, one panel per case (bench/concurrency-auto.py); panels filled in by the script
set terminal pngcairo size 1200,@HEIGHT@ font "sans,9"
set output "@PNG@"
set multiplot layout @ROWS@,@COLS@ title "@TITLE@"
set xlabel "seconds since infergate-bulk started"
set ylabel "output tokens/s (simulated, 3 s mean)"
set y2label "requests"
set format y "%.0s%c"
set yrange [0:*]
set y2range [0:*]
set ytics nomirror
set y2tics
set grid
set key bottom right font ",8"
@PANELS@
unset multiplot
