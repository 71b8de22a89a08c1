# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_rate.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_rate.svg'
set termoption noenhanced
set title 'Saves: rate offered and absorbed against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
$d0 << EOD
1.17938 1.17938
1.76907 1.76907
1.91649 1.91649
2.06391 2.06391
2.35876 2.35876
4.71751 4.71751
EOD
$d1 << EOD
1.17938 1.21218
1.76907 1.70388
1.91649 1.78344
2.06391 1.76584
2.35876 1.87002
4.71751 1.62583
EOD
$d2 << EOD
1.17938 2.03725
4.71751 2.03725
EOD
$d3 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.71751
EOD
$d4 << EOD
1.17938 1.19639
1.47422 1.45252
1.62164 1.58689
1.76907 1.57209
2.35876 1.51605
4.71751 1.57345
EOD
$d5 << EOD
1.17938 1.80974
4.71751 1.80974
EOD
$d6 << EOD
1.17938 1.17938
1.76907 1.76907
1.91649 1.91649
2.06391 2.06391
2.35876 2.35876
4.71751 4.71751
EOD
$d7 << EOD
1.17938 1.20553
1.76907 1.74815
1.91649 1.67443
2.06391 1.77547
2.35876 1.87837
4.71751 1.82397
EOD
$d8 << EOD
1.17938 1.90691
4.71751 1.90691
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-1352.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-1352.json)', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-1352.json)', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-1354.json)', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-1354.json)', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-1354.json)', \
     $d6 using 1:2 with linespoints lw 2 pt 7 lc 7 dt 1 title 'offered: fs:///work/benchdir-save, llama-3.1-8b (save-fs-1353.json)', \
     $d7 using 1:2 with linespoints lw 2 pt 7 lc 8 dt 1 title 'absorbed: fs:///work/benchdir-save, llama-3.1-8b (save-fs-1353.json)', \
     $d8 using 1:2 with linespoints lw 2 pt 7 lc 9 dt 2 title 'fio O_DIRECT write, same disk: fs:///work/benchdir-save, llama-3.1-8b (save-fs-1353.json)'
